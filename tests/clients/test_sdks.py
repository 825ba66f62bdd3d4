"""The official OpenAI and Anthropic SDKs run a tool loop through the gateway, stream and not,
with their own default-sized max_tokens clamped to the tenant's cap."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.clients.conftest import ASK, CAP, KEY, ToolLog, check_loop
from tests.e2e.harness import RunningGateway
from tests.fakes.upstream import FakeUpstream

OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a place",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Weather for a place",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def _openai_turn(client: openai.OpenAI, messages: list[Any], stream: bool) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": "gpt-4o-mini", "messages": messages, "tools": [OPENAI_TOOL]}
    kwargs["max_tokens"] = 64000
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**kwargs)
        assert raw.headers["x-lantern-max-tokens-clamped"] == str(CAP)
        return raw.parse().choices[0].message.model_dump(exclude_none=True)
    text, calls = "", {}
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(
                call.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            entry["id"] = call.id or entry["id"]
            entry["function"]["name"] += (call.function.name or "") if call.function else ""
            entry["function"]["arguments"] += (
                (call.function.arguments or "") if call.function else ""
            )
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_tool_loop(
    gateway: RunningGateway, upstream: FakeUpstream, tools: ToolLog, stream: bool
) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    before = len(upstream.requests)
    messages: list[Any] = [{"role": "user", "content": ASK}]
    message = _openai_turn(client, messages, stream)
    messages.append(message)
    for call in message["tool_calls"]:
        result = tools.get_weather(**json.loads(call["function"]["arguments"]))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    check_loop(upstream, tools, before, _openai_turn(client, messages, stream)["content"])


def _anthropic_turn(client: anthropic.Anthropic, messages: list[Any], stream: bool) -> Any:
    kwargs: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "messages": messages,
        "tools": [ANTHROPIC_TOOL],
    }
    if not stream:
        return client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as events:
        return events.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_sdk_tool_loop(
    gateway: RunningGateway, upstream: FakeUpstream, tools: ToolLog, stream: bool
) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=30)
    before = len(upstream.requests)
    messages: list[Any] = [{"role": "user", "content": ASK}]
    reply = _anthropic_turn(client, messages, stream)
    assert reply.id.startswith("msg_") and reply.stop_reason == "tool_use"
    messages.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
    )
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": tools.get_weather(**b.input)}
        for b in reply.content
        if b.type == "tool_use"
    ]
    messages.append({"role": "user", "content": results})
    final = _anthropic_turn(client, messages, stream)
    check_loop(upstream, tools, before, "".join(b.text for b in final.content if b.type == "text"))
