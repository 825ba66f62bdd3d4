"""Converse replies and ConverseStream events → canonical responses, stream events and usage.

Pure decoding: no boto3, no I/O.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from adapters.types import (
    ChatResponse,
    ReplyPart,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingPart,
    ThinkingStart,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
    Usage,
)

_STOP: Mapping[str, StopReason] = {
    "end_turn": "stop",
    "tool_use": "tool_use",
    "max_tokens": "length",
    "stop_sequence": "stop_sequence",
    # a filter's stop is OpenAI's `content_filter`, Anthropic's `refusal`: canonical "error"
    "guardrail_intervened": "error",
    "content_filtered": "error",
    "model_context_window_exceeded": "length",
}


def usage_from_converse(u: Mapping[str, Any]) -> Usage:
    """Converse's `inputTokens` excludes cache reads and writes, as canonical `Usage` does."""
    return Usage(
        input_tokens=int(u.get("inputTokens", 0)),
        output_tokens=int(u.get("outputTokens", 0)),
        cache_read_tokens=int(u.get("cacheReadInputTokens", 0)),
        cache_write_tokens=int(u.get("cacheWriteInputTokens", 0)),
    )


def stop_reason_from_converse(reason: str | None) -> StopReason:
    return _STOP.get(reason or "", "error")


def decode_converse(model_id: str, reply: Mapping[str, Any]) -> ChatResponse:
    content: list[ReplyPart] = []
    for block in reply.get("output", {}).get("message", {}).get("content", []):
        if "reasoningContent" in block:
            content.append(_thinking(block["reasoningContent"]))
        elif "text" in block:
            content.append(TextPart(block["text"]))
        elif "toolUse" in block:
            use = block["toolUse"]
            args = json.dumps(use.get("input", {}), separators=(",", ":"), ensure_ascii=False)
            content.append(ToolUsePart(use["toolUseId"], use["name"], args))
    request_id = reply.get("ResponseMetadata", {}).get("RequestId", "")
    return ChatResponse(
        id=f"bedrock-{request_id}",
        model=model_id,
        content=tuple(content),
        stop_reason=stop_reason_from_converse(reply.get("stopReason")),
        usage=usage_from_converse(reply.get("usage", {})),
    )


def _thinking(reasoning: Mapping[str, Any]) -> ThinkingPart:
    if "redactedContent" in reasoning:
        return ThinkingPart(redacted_data=_b64(reasoning["redactedContent"]))
    text = reasoning.get("reasoningText", {})
    return ThinkingPart(str(text.get("text", "")), str(text.get("signature", "")))


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


def _reasoning_delta(index: int, reasoning: Mapping[str, Any], opened: bool) -> list[StreamEvent]:
    if "redactedContent" in reasoning:
        return [ThinkingStart(index, _b64(reasoning["redactedContent"]))]
    delta = ThinkingDelta(
        index, str(reasoning.get("text", "")), str(reasoning.get("signature", ""))
    )
    return [delta] if opened else [ThinkingStart(index), delta]


class ConverseStreamDecoder:
    """ConverseStream events → canonical stream events (StreamEnd after `metadata`)."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.stop: StopReason = "error"
        self.ended = False
        self._thinking: set[int] = set()  # block indexes whose thinking has begun

    def feed(self, request_id: str, event: Mapping[str, Any]) -> list[StreamEvent]:
        if "messageStart" in event:
            return [StreamStart(f"bedrock-{request_id}", self.model_id)]
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = start.get("start", {}).get("toolUse")
            if use:
                return [ToolCallStart(start["contentBlockIndex"], use["toolUseId"], use["name"])]
        elif "contentBlockDelta" in event:
            d = event["contentBlockDelta"]
            index, delta = d["contentBlockIndex"], d.get("delta", {})
            if "text" in delta:
                return [TextDelta(index, delta["text"])]
            if "toolUse" in delta:
                return [ToolCallDelta(index, delta["toolUse"].get("input", ""))]
            if "reasoningContent" in delta:
                opened = index in self._thinking
                self._thinking.add(index)
                return _reasoning_delta(index, delta["reasoningContent"], opened)
        elif "messageStop" in event:
            self.stop = stop_reason_from_converse(event["messageStop"].get("stopReason"))
        elif "metadata" in event:
            self.ended = True
            return [StreamEnd(self.stop, usage_from_converse(event["metadata"].get("usage", {})))]
        return []
