"""A Claude-Code-shaped session through a real gateway: system blocks with a moving
`cache_control`, betas, extended thinking with tools, `count_tokens` before each call. Every
block reaches the upstream as the client sent it, signed thinking survives the round trip, and
the provider's usage comes back unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.claude import COUNT_TOKENS, REDACTED, USAGE, FakeClaude, sign

KEY = "lt-claude-code-key-0001"
BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
)
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
THINKING = {"type": "enabled", "budget_tokens": 2048}


@pytest.fixture
def claude() -> Iterator[FakeClaude]:
    with FakeClaude() as fake:
        yield fake


@pytest.fixture
def gateway(claude: FakeClaude, tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    # relocation off: this session checks that blocks pass through as sent; the autopilot would
    # learn the changing `gitStatus` line and move it (tests/cachekeys/test_relocation_e2e.py)
    cache = {"normalise": {"relocate_volatile": "never"}}
    write_policy(
        tmp_path / "policies", "acme", KEY, limits={"max_output_tokens": 16000}, cache=cache
    )
    backend = {
        "kind": "anthropic",
        "name": "fake-claude",
        "base_url": claude.base_url,
        "model": "claude-sonnet-4-5",
        "api_key_env": None,
        "timeout_s": 5,
    }
    models = [{"name": "claude-sonnet-4-5", "backends": [backend]}]
    running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
    try:
        yield running
    finally:
        running.stop()


def _client(gw: RunningGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0, timeout=30)


def _system(turn: int) -> list[dict[str, Any]]:
    """Claude Code's system blocks; the breakpoint moves to the last block as the turn grows."""
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": "Use the tools. " * 40},
        {"type": "text", "text": f"gitStatus: turn {turn}"},
    ]
    blocks[-1 if turn % 2 else 1]["cache_control"] = {"type": "ephemeral"}
    return blocks


def _call(client: anthropic.Anthropic, messages: list[dict[str, Any]], turn: int, stream: bool):
    kwargs: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,  # Claude Code's own default, over the tenant's cap: clamped
        "system": _system(turn),
        "tools": TOOLS,
        "thinking": THINKING,
        "messages": messages,
        "extra_headers": {"anthropic-beta": BETAS + ",made-up-beta-2099-01-01"},
    }
    counted = client.messages.with_raw_response.count_tokens(
        model="claude-sonnet-4-5",
        system=_system(turn),
        tools=TOOLS,  # type: ignore[arg-type]
        thinking=THINKING,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
    )
    assert counted.headers["x-lantern-token-count"] == "exact"
    assert counted.parse().input_tokens == COUNT_TOKENS
    if not stream:
        raw = client.messages.with_raw_response.create(**kwargs)
        assert raw.headers["x-lantern-max-tokens-clamped"] == "16000"
        return raw.parse()
    with client.messages.stream(**kwargs) as events:
        return events.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_claude_code_session_passes_through_unchanged(
    gateway: RunningGateway, claude: FakeClaude, stream: bool
) -> None:
    client = _client(gateway)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    for turn in range(3):
        reply = _call(client, messages, turn, stream)
        assert reply.id.startswith("msg_")
        assert reply.usage.cache_read_input_tokens == USAGE["cache_read_input_tokens"]
        assert reply.usage.cache_creation_input_tokens == USAGE["cache_creation_input_tokens"]
        assert reply.usage.input_tokens == USAGE["input_tokens"]
        assert reply.usage.output_tokens == USAGE["output_tokens"]
        thinking, redacted = reply.content[0], reply.content[1]
        assert thinking.type == "thinking" and thinking.signature == sign(thinking.thinking)
        assert redacted.type == "redacted_thinking" and redacted.data == REDACTED
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": content})
        upstream = claude.app.messages_bodies()[-1]
        assert upstream["messages"] == messages[:-1]  # every block as the client sent it
        assert upstream["system"] == _system(turn)
        assert upstream["thinking"] == THINKING and upstream["max_tokens"] == 16000
        if reply.stop_reason == "tool_use":
            result = {"type": "tool_result", "tool_use_id": reply.content[-1].id, "content": "21C"}
            messages.append({"role": "user", "content": [result]})
        else:
            messages.append({"role": "user", "content": "Thanks. And tomorrow?"})
    betas = {
        r.headers.get("anthropic-beta") for r in claude.app.requests if r.path == "/v1/messages"
    }
    assert betas == {BETAS}  # the allow-list drops the made-up beta


def test_stream_start_reports_the_providers_cache_reads(gateway: RunningGateway) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    with httpx.stream(
        "POST", f"{gateway.url}/v1/messages", json=body, headers={"x-api-key": KEY}
    ) as reply:
        lines = reply.iter_lines()
        first = next(lines, "")
        data = next(line for line in lines if line.startswith("data:"))
    assert first == "event: message_start"
    assert '"cache_read_input_tokens":5120' in data and '"id":"msg_fake' in data


def test_messages_without_max_tokens_is_a_400_in_anthropics_shape(gateway: RunningGateway) -> None:
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(f"{gateway.url}/v1/messages", json=body, headers={"x-api-key": KEY})
    assert reply.status_code == 400
    assert reply.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "invalid request: max_tokens: required",
        },
    }


def test_ultrathink_over_the_cap_lowers_the_thinking_budget_with_max_tokens(
    gateway: RunningGateway, claude: FakeClaude
) -> None:
    """Claude Code's "ultrathink" (max_tokens 32,000, budget 31,999) under a 16,000 cap: the
    budget is lowered with max_tokens (the provider refuses a budget at or over max_tokens),
    both named in the reply's headers; streamed the same."""
    client = _client(gateway)
    ultra = {"type": "enabled", "budget_tokens": 31999}
    kwargs: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "thinking": ultra,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
    }
    raw = client.messages.with_raw_response.create(**kwargs)
    assert raw.headers["x-lantern-max-tokens-clamped"] == "16000"
    assert raw.headers["x-lantern-thinking-budget-clamped"] == "15999"  # 31,999 / 32,000 of it
    sent = claude.app.messages_bodies()[-1]
    assert (sent["max_tokens"], sent["thinking"]) == (16000, {**ultra, "budget_tokens": 15999})
    with client.messages.with_streaming_response.create(**kwargs, stream=True) as streamed:
        assert streamed.headers["x-lantern-thinking-budget-clamped"] == "15999"
    assert claude.app.messages_bodies()[-1]["thinking"]["budget_tokens"] == 15999
    kept = {"type": "enabled", "budget_tokens": 2048}  # fits below the cap: left as sent
    raw = client.messages.with_raw_response.create(**{**kwargs, "thinking": kept})
    assert "x-lantern-thinking-budget-clamped" not in raw.headers
    assert claude.app.messages_bodies()[-1]["thinking"] == kept


def test_a_thinking_budget_no_cap_leaves_room_for_is_refused_by_name(
    claude: FakeClaude, tmp_path: Path
) -> None:
    """A cap of 1,024 leaves no budget the provider takes (at least 1,024, below max_tokens):
    a 400 naming `thinking.budget_tokens`, before the call is reserved or sent."""
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, limits={"max_output_tokens": 1024})
    backend = {"kind": "anthropic", "name": "fake-claude", "base_url": claude.base_url}
    backend |= {"model": "claude-sonnet-4-5", "api_key_env": None}
    models = [{"name": "claude-sonnet-4-5", "backends": [backend]}]
    running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
    try:
        with pytest.raises(anthropic.BadRequestError) as refused:
            _client(running).messages.create(
                model="claude-sonnet-4-5",
                max_tokens=32000,
                thinking={"type": "enabled", "budget_tokens": 31999},
                messages=[{"role": "user", "content": "hi"}],
            )
        assert "thinking.budget_tokens" in refused.value.message
        assert claude.app.messages_bodies() == []
    finally:
        running.stop()
