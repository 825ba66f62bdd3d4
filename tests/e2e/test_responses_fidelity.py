"""Nothing lost on the native Responses relay: an upstream that speaks the Responses API,
answering with every field OpenAI sends today (tests/fakes/today_responses.py: reasoning with
encrypted content and a summary, a web search call, a cited answer, cached and reasoning token
counts, the service tier), reaches the client as it sent it, streamed and not, byte for byte
but for the door's documented edits of the response object: the model as the client asked, its
`store` and `previous_response_id`. The official `openai` SDK reads every field back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.e2e.test_responses_door import _ledger_rows
from tests.fakes import today_responses as today
from tests.fakes.upstream import FakeUpstream

KEY = "lt-responses-fidelity-0001"
ASKED = "gpt-native"
EDITS = {"model": ASKED, "previous_response_id": None, "store": True}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    with FakeUpstream() as fake:
        fake.app.today = True
        backend = {
            "kind": "openai_compatible",
            "name": "responses-today",
            "base_url": fake.openai_base_url,
            "model": today.MODEL,
            "responses": "native",
        }
        models = [{"name": ASKED, "backends": [backend]}]
        prices = {ASKED: {"input": 1.25, "output": 10.0}}
        config = write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
        running = start_gateway(config)
        try:
            yield running
        finally:
            running.stop()


def _post(gw: RunningGateway, body: dict[str, Any]) -> httpx.Response:
    sent = {"model": ASKED, "input": "news?", "max_output_tokens": 100, **body}
    headers = {"authorization": f"Bearer {KEY}"}
    return httpx.post(f"{gw.url}/v1/responses", json=sent, headers=headers, timeout=10)


def _as_relayed() -> bytes:
    """The fake's frames with the door's edits in each event that carries the response."""
    out = []
    for event in today.events():
        if "response" in event:
            event = {**event, "response": {**event["response"], **EDITS}}
        out.append(b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event)))
    return b"".join(out)


def test_the_reply_and_the_stream_are_the_upstreams_with_the_doors_edits(
    gateway: RunningGateway,
) -> None:
    reply = _post(gateway, {})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {**today.response(), **EDITS}
    streamed = _post(gateway, {"stream": True})
    assert streamed.status_code == 200, streamed.text
    assert streamed.content == _as_relayed()
    # what is stored is what the client got
    auth = {"authorization": f"Bearer {KEY}"}
    stored = httpx.get(f"{gateway.url}/v1/responses/{today.RESPONSE_ID}", headers=auth)
    assert stored.json() == {**today.response(), **EDITS}


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_sdk_reads_todays_fields(gateway: RunningGateway, stream: bool) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    asked: dict[str, Any] = {
        "model": ASKED,
        "input": "news?",
        "max_output_tokens": 100,
        "include": ["reasoning.encrypted_content"],
    }
    if stream:
        with client.responses.stream(**asked) as events:
            kinds = [event.type for event in events]
            reply = events.get_final_response()
        assert kinds == [e["type"] for e in today.events()]
    else:
        reply = client.responses.create(**asked)
    reasoning, search, message = reply.output
    assert reasoning.type == "reasoning"
    assert reasoning.encrypted_content == today.REASONING["encrypted_content"]
    assert [s.text for s in reasoning.summary] == [today.SUMMARY]
    assert search.type == "web_search_call" and search.status == "completed"
    assert search.action.model_dump(exclude_none=True) == today.SEARCH["action"]
    assert message.type == "message"
    text = message.content[0]
    assert text.type == "output_text" and text.text == reply.output_text
    assert [a.model_dump() for a in text.annotations] == [today.ANNOTATION]
    assert reply.usage is not None and reply.usage.model_dump(exclude_none=True) == today.USAGE
    assert (reply.model, reply.service_tier) == (ASKED, "default")
    assert reply.text.model_dump(exclude_none=True) == today.response()["text"]
    row = _ledger_rows(gateway, 1)[-1]
    cached = today.USAGE["input_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert (row["input_tokens"], row["cache_read_tokens"]) == (9012 - cached, cached)
    assert (row["output_tokens"], row["door"]) == (412, "responses")
