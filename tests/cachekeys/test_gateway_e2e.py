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
        cache = {"normalise": {"relocate_volatile": True}}
        write_policy(tmp_path / "policies", "acme", KEY, models=[MODEL], cache=cache)
        backend = {
            "kind": "anthropic",
            "name": "fake",
            "base_url": upstream.base_url,
            "model": MODEL,
            "api_key_env": None,
            "timeout_s": 10,
        }
        config = write_config(
            tmp_path / "lantern.yaml", tmp_path, [{"name": MODEL, "backends": [backend]}]
        )
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
    for call, usage in enumerate(usages[1:], start=1):
        assert (
            usage["cache_read_input_tokens"]
            == fake.calls[call - 1].read + fake.calls[call - 1].write
        )
        predicted = int(verdicts[call].split("read=")[1])
        assert (
            abs(predicted - usage["cache_read_input_tokens"])
            <= 0.05 * usage["cache_read_input_tokens"]
        )
    assert json.dumps(sent).count("cache_control") == 2  # system, last stable block (tools < 1024)
