"""Through a real gateway: edits reach the provider, the header explains each call, reads happen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

KEY = "lt-cache-e2e-key-0001"
MODEL = "claude-sonnet-4-5"


class Clock:
    now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[RunningGateway, FakeUpstream, PromptCacheFake]]:
    fake = PromptCacheFake(Clock())
    with FakeUpstream(cache=fake) as upstream:
        (tmp_path / "policies").mkdir()
        # the default cache policy: date-times are relocated without being asked
        write_policy(tmp_path / "policies", "acme", KEY, models=[MODEL, "gpt-4o"])
        backend = {
            "kind": "anthropic",
            "name": "fake",
            "base_url": upstream.base_url,
            "model": MODEL,
            "api_key_env": None,
            "timeout_s": 10,
        }
        openai_backend = {
            "kind": "openai_compatible",
            "name": "fake-openai",
            "base_url": upstream.openai_base_url,
            "model": "gpt-4o",
            "timeout_s": 10,
        }
        models = [
            {"name": MODEL, "backends": [backend]},
            {"name": "gpt-4o", "backends": [openai_backend]},
        ]
        config = write_config(tmp_path / "lantern.yaml", tmp_path, models)
        gateway = start_gateway(config)
        try:
            yield gateway, upstream, fake
        finally:
            gateway.stop()


def body(turns: int, second: int) -> dict:
    messages: list[dict] = [{"role": "user", "content": "Fix the test." + " a" * 300}]
    for t in range(1, turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{t}", "name": "run", "input": {"b": 1, "a": t}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{t}", "content": "ok" + " b" * 300}
                ],
            }
        )
    tools = [
        {"name": n, "description": "tool", "input_schema": {"type": "object", "properties": {}}}
        for n in ("run", "edit")
    ]
    system = f"Now 2026-11-30T10:00:{second:02d}Z. " + "Rules." + " r" * 1200
    return {
        "model": MODEL,
        "max_tokens": 20,
        "system": system,
        "tools": tools,
        "messages": messages,
    }


def test_session_through_the_gateway(
    stack: tuple[RunningGateway, FakeUpstream, PromptCacheFake],
) -> None:
    gateway, upstream, fake = stack
    headers = {"x-api-key": KEY, "x-session-id": "s-e2e"}
    verdicts, usages = [], []
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30.0) as client:
        for turns in (1, 2, 3):
            reply = client.post("/v1/messages", json=body(turns, second=turns))
            assert reply.status_code == 200, reply.text
            verdicts.append(reply.headers["x-lantern-cache"])
            usages.append(reply.json()["usage"])
    assert [v.split(";")[0] for v in verdicts] == ["first_call", "kept", "kept"]
    sent = upstream.requests[-1].json()
    assert [t["name"] for t in sent["tools"]] == ["edit", "run"]
    assert sent["system"][0]["text"].startswith("Now {{volatile:1}}. Rules.")
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "5m"}
    assert sent["messages"][-1]["content"][-1]["text"].startswith("<volatile-context>")
    assert sent["messages"][-1]["content"][-2]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "5m",
    }
    assert usages[0]["cache_read_input_tokens"] == 0
    calls = [c for c in fake.calls if c.wire == "anthropic" and c.prompt_tokens > 1000]  # no probes
    for call, usage in enumerate(usages[1:], start=1):
        assert usage["cache_read_input_tokens"] == calls[call - 1].read + calls[call - 1].write
        predicted = int(verdicts[call].split("read=")[1])
        assert (
            abs(predicted - usage["cache_read_input_tokens"])
            <= 0.05 * usage["cache_read_input_tokens"]
        )
    assert json.dumps(sent).count("cache_control") == 2  # system, last stable block (tools < 1024)


def openai_body(turns: int) -> dict:
    messages: list[dict] = [
        {"role": "system", "content": "Rules at 2026-11-30T10:00:00Z." + " r" * 1200},
        {"role": "user", "content": "Fix the test."},
    ]
    for t in range(1, turns):
        call = {
            "id": f"c{t}",
            "type": "function",
            "function": {"name": "run", "arguments": '{"a":1}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": "ok" + " b" * 200})
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("run", "edit")
    ]
    return {"model": "gpt-4o", "messages": messages, "tools": tools}


def test_openai_session_through_the_gateway(
    stack: tuple[RunningGateway, FakeUpstream, PromptCacheFake],
) -> None:
    gateway, upstream, fake = stack
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": "s-openai"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30.0) as client:
        replies = [client.post("/v1/chat/completions", json=openai_body(turns)) for turns in (1, 2)]
    assert [r.status_code for r in replies] == [200, 200], replies[-1].text
    sent = [r.json() for r in upstream.requests[-2:]]
    keys = {s["prompt_cache_key"] for s in sent}
    assert len(keys) == 1 and keys.pop().startswith("lt-")  # one tenant-scoped key for the session
    assert [t["function"]["name"] for t in sent[1]["tools"]] == ["edit", "run"]
    assert sent[1]["messages"][0]["content"].startswith("Rules at {{volatile:1}}.")
    assert sent[1]["messages"][-1]["role"] == "user"  # the tail follows the tool answer
    cached = replies[1].json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    prompt = replies[1].json()["usage"]["prompt_tokens"]
    (accounted,) = [c for c in fake.calls if c.wire == "openai" and c.prompt_tokens == prompt]
    assert cached == accounted.read and cached >= 1024 and (cached - 1024) % 128 == 0
    assert replies[1].headers["x-lantern-cache"].startswith("kept; ")
