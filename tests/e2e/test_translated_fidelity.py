"""What maps across a translation reaches the client: an upstream of the other wire answering
with today's fields (tests/fakes/today.py) gives an OpenAI client its web citations as
`annotations` (chat) or `output_text.annotations` (Responses, streamed too) and its reasoning
token count, and an Anthropic client the text without the citations that have no faithful
Anthropic form; every OpenAI body valid against OpenAI's published schemas. Raw HTTP, so the
bodies compared are exactly the ones sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes import today
from tests.fakes.upstream import FakeUpstream
from tests.openapi.openai_schema import check

KEY = "lt-translated-fidelity-01"
CLAUDE, GPT = "claude-sonnet-4-5", "gpt-4o-mini"  # an Anthropic and an OpenAI-compatible upstream
SPAN = {"url": today.URL, "title": today.TITLE, "start_index": 0, "end_index": len(today.TEXT)}
CHAT_NOTE = {"type": "url_citation", "url_citation": SPAN}
RESPONSES_NOTE = {"type": "url_citation", **SPAN}
USAGE = today.ANTHROPIC_USAGE
CLAUDE_PROMPT = 12 + 5120 + 310  # input, cache reads and writes: OpenAI's prompt_tokens


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    with FakeUpstream() as fake:
        fake.app.today = True
        claude = {"kind": "anthropic", "name": "claude", "base_url": fake.base_url}
        claude |= {"model": today.UPSTREAM_MODEL["anthropic"], "api_key_env": None}
        gpt = {"kind": "openai_compatible", "name": "oai", "base_url": fake.openai_base_url}
        gpt |= {"model": today.UPSTREAM_MODEL["openai"]}
        models = [{"name": CLAUDE, "backends": [claude]}, {"name": GPT, "backends": [gpt]}]
        running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
        try:
            yield running
        finally:
            running.stop()


def _post(gw: RunningGateway, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    reply = httpx.post(f"{gw.url}{path}", json=body, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply


def _events(reply: httpx.Response) -> list[dict[str, Any]]:
    lines = [ln[6:] for ln in reply.text.split("\n") if ln.startswith("data: ")]
    return [orjson.loads(ln) for ln in lines if ln != "[DONE]"]


def test_an_anthropic_citation_reaches_a_chat_client(gateway: RunningGateway) -> None:
    body = {"model": CLAUDE, "messages": [{"role": "user", "content": "news?"}]}
    reply = _post(gateway, "/v1/chat/completions", body).json()
    check("CreateChatCompletionResponse", reply)
    assert reply["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": today.TEXT,
                "refusal": None,
                "annotations": [CHAT_NOTE],
            },
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert reply["usage"] == {
        "prompt_tokens": CLAUDE_PROMPT,
        "completion_tokens": USAGE["output_tokens"],
        "total_tokens": CLAUDE_PROMPT + USAGE["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": 5120, "cache_write_tokens": 310},
    }
    # streamed: OpenAI's chunk schema has no annotations; the text and usage still come
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    chunks = _events(_post(gateway, "/v1/chat/completions", streamed))
    for chunk in chunks:
        check("CreateChatCompletionStreamResponse", chunk)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == today.TEXT
    assert not [d for d in deltas if "annotations" in d or "tool_calls" in d]
    assert chunks[-1]["usage"] == reply["usage"]


@pytest.mark.parametrize("model", [CLAUDE, GPT])
def test_citations_and_reasoning_counts_reach_a_responses_client(
    gateway: RunningGateway, model: str
) -> None:
    body = {"model": model, "input": "news?", "store": False}
    reply = _post(gateway, "/v1/responses", body).json()
    check("Response", reply)
    [message] = reply["output"]
    assert message["content"] == [
        {"type": "output_text", "text": today.TEXT, "annotations": [RESPONSES_NOTE], "logprobs": []}
    ]
    reasoning = 27 if model == GPT else 0  # Anthropic counts its thinking only as output
    assert reply["usage"]["output_tokens_details"] == {"reasoning_tokens": reasoning}
    options = {"stream_options": {"include_usage": True}} if model == GPT else {}
    events = _events(_post(gateway, "/v1/responses", {**body, "stream": True, **options}))
    for event in events:
        check("ResponseStreamEvent", event)
    final = events[-1]["response"]
    assert final["usage"] == reply["usage"]
    text = final["output"][0]["content"][0]
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    if model == CLAUDE:  # citations_delta: carried in the stream
        assert [e["annotation"] for e in added] == [RESPONSES_NOTE]
        assert text["annotations"] == [RESPONSES_NOTE]
    else:  # today's chat chunks carry no annotations: nothing to carry
        assert (added, text["annotations"]) == ([], [])
    assert text["text"] == today.TEXT


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_client_gets_no_invented_citation(
    gateway: RunningGateway, stream: bool
) -> None:
    """A url_citation has no `encrypted_index`, which Anthropic's web citation requires."""
    body = {"model": GPT, "max_tokens": 100, "stream": stream}
    body["messages"] = [{"role": "user", "content": "news?"}]
    reply = _post(gateway, "/v1/messages", body)
    if not stream:
        assert reply.json()["content"] == [{"type": "text", "text": today.TEXT}]
        assert reply.json()["usage"]["output_tokens"] == today.OPENAI_USAGE["completion_tokens"]
        return
    events = _events(reply)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d["text"] for d in deltas) == today.TEXT
    assert {d["type"] for d in deltas} == {"text_delta"}


def test_an_upstream_error_keeps_its_type_and_request_id_across_the_wires(
    gateway: RunningGateway,
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    overloaded = {"model": CLAUDE, "messages": [{"role": "user", "content": "status:529"}]}
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=overloaded, headers=headers)
    assert reply.status_code == 502
    check("ErrorResponse", reply.json())
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("overloaded_error", "upstream", None)
    assert reply.headers["x-request-id"] == today.REQUEST_ID["anthropic"]
    too_long = {
        "model": GPT,
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "status:400"}],
    }
    reply = httpx.post(f"{gateway.url}/v1/messages", json=too_long, headers=headers)
    assert reply.status_code == 400
    assert reply.json()["error"] == {
        "type": "invalid_request_error",
        "message": f"upstream oai failed: HTTP 400: {today.OPENAI_ERRORS[400]['message']}",
    }
    assert reply.headers["request-id"] == today.REQUEST_ID["openai"]
