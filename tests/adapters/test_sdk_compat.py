"""The official `openai` and `anthropic` SDKs parse what Lantern's encoders produce.

The fake upstream answers with `adapters.wire.openai`/`anthropic` encoders (and their stream
encoders), so every assertion here is about our bytes, read by the real clients.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.fakes.upstream import FakeUpstream

FOX = "The quick brown fox jumps over the lazy dog"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
]
CLAUDE_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
]


def oai(up: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=up.openai_base_url, api_key="sk-test", max_retries=0)


def claude(up: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=up.base_url, api_key="sk-ant", max_retries=0)


def test_openai_sdk_non_stream_with_cached_tokens(
    cached_upstream: tuple[FakeUpstream, Any],
) -> None:
    up, _ = cached_upstream
    resp = oai(up).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": FOX * 4}]
    )
    assert resp.choices[0].message.content == FOX
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.prompt_tokens_details is not None
    prompt = resp.usage.prompt_tokens
    assert resp.usage.prompt_tokens_details.cached_tokens == prompt // 2
    assert resp.usage.prompt_tokens_details.cache_write_tokens == 3
    assert (resp.usage.completion_tokens, resp.usage.total_tokens) == (9, prompt + 9)


def test_openai_sdk_stream_include_usage_and_tool_calls(upstream: FakeUpstream) -> None:
    chunks = list(
        oai(upstream).chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi words:3"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "The quick brown"
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 3)
    assert chunks[-2].choices[0].finish_reason == "stop"
    plain = list(
        oai(upstream).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert all(c.usage is None and c.choices for c in plain)
    with oai(upstream).chat.completions.stream(
        model="gpt-4o-mini",
        tools=TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "call:get_weather in Oslo"}],
    ) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, call.function.arguments) == (  # type: ignore[union-attr]
        "get_weather",
        '{"text":"call:get_weather in Oslo"}',
    )
    assert final.choices[0].finish_reason == "tool_calls"


def test_openai_sdk_parses_error_bodies(upstream: FakeUpstream) -> None:
    upstream.fail_next(status=500)
    with pytest.raises(openai.InternalServerError) as info:
        oai(upstream).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert (info.value.type, info.value.body) == (
        "api_error",
        {"message": "injected failure", "type": "api_error", "param": None, "code": None},
    )
    upstream.fail_next(status=429, retry_after="1")
    with pytest.raises(openai.RateLimitError) as limited:
        oai(upstream).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert limited.value.type == "rate_limit_error"
    with pytest.raises(openai.BadRequestError) as bad:
        oai(upstream).chat.completions.create(model="m", messages=[{"role": "wizard"}])  # type: ignore[list-item]
    assert bad.value.body["message"] == "messages[0].role: unsupported role 'wizard'"  # type: ignore[index]


def test_anthropic_sdk_non_stream_with_cache_fields(
    cached_upstream: tuple[FakeUpstream, Any],
) -> None:
    up, _ = cached_upstream
    msg = claude(up).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4,
        stop_sequences=["never"],
        system=[{"type": "text", "text": FOX * 4, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hi"}],
        metadata={"user_id": "u-1"},
    )
    assert [b.text for b in msg.content if b.type == "text"] == ["The quick brown fox"]
    assert msg.stop_reason == "max_tokens"
    usage = msg.usage
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens  # type: ignore[operator]
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (prompt // 2, 3)
    assert usage.output_tokens == 4


def test_anthropic_sdk_stream_with_tool_use(cached_upstream: tuple[FakeUpstream, Any]) -> None:
    up, _ = cached_upstream
    with claude(up).messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "call:get_weather"}],
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    tool = final.content[0]
    assert (tool.type, tool.name, tool.input) == (  # type: ignore[union-attr]
        "tool_use",
        "get_weather",
        {"text": "call:get_weather"},
    )
    assert final.stop_reason == "tool_use"
    assert final.usage.cache_creation_input_tokens == 3
    assert final.usage.output_tokens == 9


def test_anthropic_sdk_text_stream_and_errors(upstream: FakeUpstream) -> None:
    with claude(upstream).messages.stream(
        model="claude-haiku-4-5",
        max_tokens=50,
        messages=[{"role": "user", "content": "stop here words:9"}],
        stop_sequences=[" jumps"],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "The quick brown fox"
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", " jumps")
    upstream.fail_next(status=429)
    with pytest.raises(anthropic.RateLimitError) as info:
        claude(upstream).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "injected failure"},
    }
    upstream.fail_next(status=529)
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        claude(upstream).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert overloaded.value.status_code == 529
