"""Anthropic Messages responses, usage and error bodies <-> canonical types.

Pure functions at the JSON edge; requests live in `request.py`, streams in
`stream.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from adapters.types import (
    ChatResponse,
    ReplyPart,
    StopReason,
    TextPart,
    ThinkingPart,
    ToolUsePart,
    Usage,
)
from adapters.wire.anthropic.blocks import decode_block, decode_citations, encode_block
from adapters.wire.json_fields import expect

REPLY_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})

STOP_FROM_WIRE: dict[str, StopReason] = {
    "end_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_use",
    "stop_sequence": "stop_sequence",
    "refusal": "error",
    "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}


STOP_TO_WIRE: dict[StopReason, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_use": "tool_use",
    "stop_sequence": "stop_sequence",
    "error": "refusal",
}


def decode_usage(usage: Mapping[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        cache_write_1h_tokens=one_hour_writes(usage),
        web_search_requests=web_searches(usage),
    )


def one_hour_writes(usage: Mapping[str, Any]) -> int:
    """`cache_creation.ephemeral_1h_input_tokens`: the part of the cache writes with a 1 h TTL."""
    split = usage.get("cache_creation")
    return int(split.get("ephemeral_1h_input_tokens") or 0) if isinstance(split, Mapping) else 0


def web_searches(usage: Mapping[str, Any]) -> int:
    """`server_tool_use.web_search_requests`: the searches the provider bills per search.
    (`web_fetch_requests` is billed as tokens only, so it is not counted.)"""
    tools = usage.get("server_tool_use")
    return int(tools.get("web_search_requests") or 0) if isinstance(tools, Mapping) else 0


def encode_usage(usage: Usage) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
    }
    if usage.cache_write_1h_tokens:  # absent, a client reads every write as a 5-minute one
        wire["cache_creation"] = {
            "ephemeral_5m_input_tokens": usage.cache_write_tokens - usage.cache_write_1h_tokens,
            "ephemeral_1h_input_tokens": usage.cache_write_1h_tokens,
        }
    if usage.web_search_requests:
        wire["server_tool_use"] = {"web_search_requests": usage.web_search_requests}
    return wire


def decode_response(body: Mapping[str, Any]) -> ChatResponse:
    blocks = expect(body.get("content"), list, "content")
    content: list[ReplyPart] = []
    for i, block in enumerate(blocks):
        # blocks it does not model (server tools and their results, code execution, future
        # kinds) count for nothing; a client of this wire gets them from `upstream`
        if isinstance(block, dict) and block.get("type") not in REPLY_BLOCKS:
            continue
        part = decode_block(block, f"content[{i}]")
        if isinstance(part, TextPart) and "citations" in block and block["citations"]:
            part = TextPart(part.text, part.cache_control, decode_citations(block["citations"]))
        if isinstance(part, TextPart | ToolUsePart | ThinkingPart):
            content.append(part)
    return ChatResponse(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=tuple(content),
        stop_reason=STOP_FROM_WIRE.get(body.get("stop_reason") or "end_turn", "stop"),
        usage=decode_usage(body.get("usage")),
        stop_sequence=body.get("stop_sequence"),
    )


def message_id(upstream_id: str) -> str:
    """An Anthropic message id (`msg_...`) for any upstream's id."""
    if upstream_id.startswith("msg_"):
        return upstream_id
    return "msg_" + (upstream_id.removeprefix("chatcmpl-") or "lantern")


def encode_response(resp: ChatResponse) -> dict[str, Any]:
    return {
        "id": message_id(resp.id),
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": [encode_block(p) for p in resp.content],
        "stop_reason": STOP_TO_WIRE[resp.stop_reason],
        "stop_sequence": resp.stop_sequence,
        "usage": encode_usage(resp.usage),
    }


def encode_error(message: str, type_: str) -> bytes:
    """The error body Anthropic clients parse: {"type":"error","error":{"type","message"}}."""
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})
