"""Breakpoint planning: at most 4, client markers kept, minimum length, TTL order, 20-block look-back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapters.types import CacheControl, ChatRequest, Message, TextPart, ToolResultPart, ToolUsePart
from adapters.wire import anthropic as anthropic_wire
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.markers import (
    BedrockCachePlan,
    apply_to_anthropic,
    apply_to_request,
    bedrock_plan,
    min_cacheable_tokens,
    plan_breakpoints,
)
from cachekeys.raw_layout import anthropic_layout
from tests.cachekeys.conftest import agent_request


def layout_of(request: ChatRequest, tokens_each: int = 600) -> PromptLayout:
    blocks = request_blocks(request)
    return PromptLayout(blocks, tuple(tokens_each for _ in blocks))


def test_min_cacheable_by_family_and_override() -> None:
    assert min_cacheable_tokens("claude-sonnet-4-5") == 1024
    assert min_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-opus-4-1") == 1024
    assert min_cacheable_tokens("claude-sonnet-4-5", {"sonnet-4-5": 2000}) == 2000


def test_tools_system_and_last_message() -> None:
    request = agent_request(turns=2)  # tools 0-1, system 2, messages 3, 4, 5
    layout = layout_of(request)
    plan = plan_breakpoints(layout, "5m", 1024)
    assert plan.indices == (1, 2, 5)
    assert [layout.blocks[i].name for i in plan.indices] == [
        "tools[1]",
        "system[0]",
        "messages[2][0]",
    ]
    marked = apply_to_request(request, layout, plan)
    assert (
        marked.tools[1].cache_control == CacheControl("5m")
        and marked.tools[0].cache_control is None
    )
    assert marked.system[0].cache_control == CacheControl("5m")
    assert marked.messages[2].content[0].cache_control == CacheControl("5m")
    assert marked.messages[0] == request.messages[0]


def test_prefixes_below_the_minimum_get_no_marker() -> None:
    request = agent_request(turns=2)
    plan = plan_breakpoints(layout_of(request, 300), "1h", 1024)
    assert plan.indices == (5,)  # tools end at 600, system at 900: below 1024; the message at 1800
    assert plan.ttl == "1h"
    assert plan_breakpoints(layout_of(request, 100), "5m", 1024).indices == ()


def test_client_markers_are_kept_and_counted() -> None:
    request = agent_request(turns=3)  # tools 0-1, system 2, messages 3..7
    messages = list(request.messages)
    messages[0] = Message("user", (TextPart("Fix the bug.", CacheControl("5m")),))
    messages[2] = replace(
        messages[2],
        content=(ToolResultPart("call_1", (TextPart("r"),), cache_control=CacheControl("5m")),),
    )
    request = replace(request, messages=tuple(messages))
    layout = layout_of(request)
    plan = plan_breakpoints(layout, "5m", 1024)
    assert plan.indices == (1, 7)  # 2 client markers + last message + last tool = 4


def test_no_duplicate_on_a_block_the_client_marked() -> None:
    request = agent_request(turns=1, tools=())
    request = replace(request, messages=(Message("user", (TextPart("x", CacheControl("5m")),)),))
    assert plan_breakpoints(layout_of(request, 2000), "5m", 1024).indices == (0,)


def test_ttl_order_longer_first() -> None:
    request = agent_request(turns=1)  # tools 0-1, system 2, message 3
    one_hour_last = replace(
        request, messages=(Message("user", (TextPart("x", CacheControl("1h")),)),)
    )
    # ours at 5m must not precede the client's 1h marker
    assert plan_breakpoints(layout_of(one_hour_last), "5m", 1024).indices == ()
    assert plan_breakpoints(layout_of(one_hour_last), "1h", 1024).indices == (1, 2)
    five_min_tool = replace(
        request,
        tools=(request.tools[0], replace(request.tools[1], cache_control=CacheControl("5m"))),
    )
    # ours at 1h must not follow the client's 5m marker
    assert plan_breakpoints(layout_of(five_min_tool), "1h", 1024).indices == ()
    assert plan_breakpoints(layout_of(five_min_tool), "5m", 1024).indices == (2, 3)


def test_volatile_tail_and_empty_blocks_are_never_marked() -> None:
    request = agent_request(turns=1)
    tail = TextPart("<volatile-context>\n{{volatile:1}} = 10:15")
    request = replace(request, messages=(Message("user", (TextPart("Fix."), TextPart(""), tail)),))
    layout = layout_of(request)
    assert layout.last_stable() == 4
    plan = plan_breakpoints(layout, "5m", 1024)
    assert [layout.blocks[i].name for i in plan.indices] == [
        "tools[1]",
        "system[0]",
        "messages[0][0]",
    ]


def test_bridge_when_a_turn_adds_more_than_20_blocks() -> None:
    request = agent_request(
        turns=2, tools=()
    )  # system 0, messages 1 (user), 2 (assistant), 3 (user)
    calls = tuple(ToolUsePart(f"c{i}", "search", "{}") for i in range(12))
    results = tuple(ToolResultPart(f"c{i}", (TextPart("r"),)) for i in range(12))
    request = replace(
        request,
        messages=(request.messages[0], Message("assistant", calls), Message("user", results)),
    )
    layout = layout_of(request, 1100)  # system 0, user 1, assistant 2..13, user 14..25
    plan = plan_breakpoints(layout, "5m", 1024)
    assert plan.indices == (0, 1, 25)  # system, the previous call's end (message 0), the last block
    few = replace(
        request,
        messages=(
            request.messages[0],
            Message("assistant", calls[:2]),
            Message("user", results[:2]),
        ),
    )
    assert plan_breakpoints(layout_of(few, 1100), "5m", 1024).indices == (0, 5)


RAW = {
    "model": "claude-sonnet-4-5",
    "system": "Be brief.",
    "tools": [{"name": "a", "description": "", "input_schema": {}}],
    "messages": [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "text", "text": "Hello"},
            ],
        },
        {"role": "user", "content": "Go"},
    ],
}


def raw_layout(body: dict, typed_tokens: tuple[int, ...], own_tokens: int = 5) -> PromptLayout:
    """The body's layout from its typed request's (`typed_tokens`) and its own blocks'."""
    typed = PromptLayout(
        request_blocks(anthropic_wire.decode_request(body, require_max_tokens=False)), typed_tokens
    )
    return anthropic_layout(body, typed, lambda block: own_tokens)


def test_apply_to_anthropic_golden() -> None:
    layout = raw_layout(RAW, (1500, 100, 10, 5, 5, 10))
    assert layout.tokens == (1500, 100, 10, 5, 5, 10)  # the thinking block is a typed block too
    assert not layout.blocks[3].is_markable
    assert [b.name for b in layout.blocks] == [
        "tools[0]",
        "system",
        "messages[0]",
        "messages[1][0]",
        "messages[1][1]",
        "messages[2]",
    ]
    plan = plan_breakpoints(layout, "1h", 1024)
    out = apply_to_anthropic(RAW, layout, plan)
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert out["tools"] == [
        {"name": "a", "description": "", "input_schema": {}, "cache_control": marker}
    ]
    assert out["system"] == [{"type": "text", "text": "Be brief.", "cache_control": marker}]
    assert out["messages"][2] == {
        "role": "user",
        "content": [{"type": "text", "text": "Go", "cache_control": marker}],
    }
    assert out["messages"][:2] == RAW["messages"][:2] and out["messages"][1] is RAW["messages"][1]
    assert RAW["system"] == "Be brief."  # not mutated


def test_thinking_blocks_are_never_marked() -> None:
    body = {**RAW, "messages": RAW["messages"][:2]}
    layout = raw_layout(body, (1500, 100, 10, 5, 5))
    plan = plan_breakpoints(layout, "5m", 1024)
    assert [layout.blocks[i].name for i in plan.indices] == ["tools[0]", "system", "messages[1][1]"]


def test_bedrock_plan() -> None:
    request = agent_request(turns=2)
    layout = layout_of(request)
    plan = plan_breakpoints(layout, "5m", 1024)
    assert bedrock_plan(layout, plan) == BedrockCachePlan(True, True, (2, 0), "5m")
    none = plan_breakpoints(layout_of(request, 10), "5m", 1024)
    assert bedrock_plan(layout, none) == BedrockCachePlan(False, False, None, "5m")


def test_a_request_level_marker_takes_a_slot() -> None:
    request = agent_request(turns=2)
    layout = layout_of(request)
    assert plan_breakpoints(layout, "5m", 1024, reserved=1).indices == (1, 2, 5)
    assert plan_breakpoints(layout, "5m", 1024, reserved=2).indices == (1, 5)


def test_a_body_that_is_not_the_typed_request_is_refused() -> None:
    with pytest.raises(ValueError, match="not the layout"):
        anthropic_layout(RAW, PromptLayout((), ()), lambda block: 1)
    typed = PromptLayout(
        request_blocks(anthropic_wire.decode_request(RAW, require_max_tokens=False)),
        (1, 1, 1, 1, 1),
    )
    with pytest.raises(ValueError, match="not the layout"):
        anthropic_layout({**RAW, "messages": RAW["messages"][:1]}, typed, lambda block: 1)
