"""Converse replies and ConverseStream events → canonical responses, stream events and usage.

Pure decoding: no boto3, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adapters.types import (
    ChatResponse,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
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
    "guardrail_intervened": "stop",
    "content_filtered": "stop",
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
    content: list[TextPart | ToolUsePart] = []
    for block in reply.get("output", {}).get("message", {}).get("content", []):
        if "text" in block:
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


class ConverseStreamDecoder:
    """ConverseStream events → canonical stream events (StreamEnd after `metadata`)."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.stop: StopReason = "error"
        self.ended = False

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
        elif "messageStop" in event:
            self.stop = stop_reason_from_converse(event["messageStop"].get("stopReason"))
        elif "metadata" in event:
            self.ended = True
            return [StreamEnd(self.stop, usage_from_converse(event["metadata"].get("usage", {})))]
        return []
