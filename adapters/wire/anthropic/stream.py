"""Anthropic Messages SSE events <-> canonical stream events.

Two small stateful classes, one per direction; no I/O. The encoder emits the sequence the
official SDK expects: message_start, ping, (content_block_start, deltas, content_block_stop)*,
message_delta with the final usage, message_stop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from adapters.errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
    UpstreamError,
    WireFormatError,
)
from adapters.sse import frame
from adapters.types import (
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextCitation,
    TextDelta,
    ThinkingDelta,
    ThinkingStart,
    ToolCallDelta,
    ToolCallStart,
    Usage,
)
from adapters.wire.anthropic.blocks import decode_citation, encode_citation
from adapters.wire.anthropic.response import (
    STOP_FROM_WIRE,
    STOP_TO_WIRE,
    encode_usage,
    message_id,
    one_hour_writes,
    web_searches,
)


def _usage_update(usage: Usage, wire: dict[str, Any]) -> Usage:
    """Fields present in a later usage object replace earlier values (they are cumulative)."""
    return Usage(
        input_tokens=wire.get("input_tokens") or usage.input_tokens,
        output_tokens=wire.get("output_tokens") or usage.output_tokens,
        cache_read_tokens=wire.get("cache_read_input_tokens") or usage.cache_read_tokens,
        cache_write_tokens=wire.get("cache_creation_input_tokens") or usage.cache_write_tokens,
        cache_write_1h_tokens=one_hour_writes(wire) or usage.cache_write_1h_tokens,
        web_search_requests=web_searches(wire) or usage.web_search_requests,
    )


class AnthropicStreamDecoder:
    """Feed each SSE event's data (the `type` field names the event); get canonical events."""

    def __init__(self, backend: str = "anthropic") -> None:
        self._backend = backend
        self._usage = Usage()
        self._stop: StopReason = "stop"
        self._stop_sequence: str | None = None
        self._ended = False
        # blocks opened as `tool_use`: a server tool's input (web search) is no tool call
        self._tool_blocks: set[int] = set()
        # a tool block's input given whole in its start, until a delta replaces it
        self._start_inputs: dict[int, str] = {}

    @property
    def ended(self) -> bool:
        return self._ended

    def feed(self, data: str) -> list[StreamEvent]:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise WireFormatError("stream", "event data is not JSON") from exc
        if not isinstance(event, dict):
            raise WireFormatError("stream", "event data is not a JSON object")
        return self.feed_event(event)

    def feed_event(self, event: dict[str, Any]) -> list[StreamEvent]:
        """One parsed event (the relay parses each once); unknown types give no events."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return [TextDelta(event["index"], delta.get("text", ""))]
            if delta.get("type") == "input_json_delta":
                if event["index"] not in self._tool_blocks:
                    return []
                self._start_inputs.pop(event["index"], None)  # deltas replace it, as in the SDK
                return [ToolCallDelta(event["index"], delta.get("partial_json", ""))]
            if delta.get("type") == "thinking_delta":
                return [ThinkingDelta(event["index"], thinking=delta.get("thinking", ""))]
            if delta.get("type") == "signature_delta":
                return [ThinkingDelta(event["index"], signature=delta.get("signature", ""))]
            if delta.get("type") == "citations_delta":
                found = decode_citation(delta.get("citation"))
                return [] if found is None else [TextCitation(event["index"], found)]
            return []
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "message_start":
            message = event.get("message") or {}
            self._usage = _usage_update(self._usage, message.get("usage") or {})
            start_usage = self._usage if message.get("usage") else None
            return [
                StreamStart(str(message.get("id", "")), str(message.get("model", "")), start_usage)
            ]
        if kind == "message_delta":
            delta = event.get("delta") or {}
            self._stop = STOP_FROM_WIRE.get(delta.get("stop_reason") or "end_turn", "stop")
            self._stop_sequence = delta.get("stop_sequence")
            self._usage = _usage_update(self._usage, event.get("usage") or {})
            return []
        if kind == "message_stop":
            return self.finish()
        if kind == "content_block_stop" and self._start_inputs:
            given = self._start_inputs.pop(event["index"], None)
            return [] if given is None else [ToolCallDelta(event["index"], given)]
        if kind == "error":
            error = event.get("error")
            raise self._error(error if isinstance(error, dict) else {}, event.get("request_id"))
        return []  # ping, content_block_stop

    def _block_start(self, event: dict[str, Any]) -> list[StreamEvent]:
        block = event.get("content_block") or {}
        index = event["index"]
        if block.get("type") == "tool_use":
            self._tool_blocks.add(index)
            given = block.get("input")  # `{}` from the API; the arguments if no delta follows
            if given:
                self._start_inputs[index] = orjson.dumps(given).decode()
            return [ToolCallStart(index, str(block.get("id", "")), str(block.get("name", "")))]
        if block.get("type") == "text" and block.get("text"):
            return [TextDelta(index, block["text"])]
        if block.get("type") == "redacted_thinking":
            return [ThinkingStart(index, str(block.get("data", "")))]
        if block.get("type") == "thinking":
            text, signature = str(block.get("thinking", "")), str(block.get("signature", ""))
            first = [ThinkingDelta(index, text, signature)] if text or signature else []
            return [ThinkingStart(index), *first]
        return []

    def _error(self, error: dict[str, Any], request_id: Any) -> UpstreamError:
        message = str(error.get("message", "stream error"))
        exc: UpstreamError
        if error.get("type") == "rate_limit_error":
            exc = ProviderRateLimited(self._backend, message)
        else:
            exc = ProviderUnavailable(self._backend, message)
        exc.provider = ProviderError.read(error, request_id)  # its `type` reaches the client
        return exc

    def finish(self) -> list[StreamEvent]:
        if self._ended:
            return []
        self._ended = True
        return [StreamEnd(self._stop, self._usage, self._stop_sequence)]


class AnthropicStreamEncoder:
    """Canonical events -> Anthropic SSE bytes. `start_usage` fills message_start's usage (a
    canonical stream knows usage only at its end, so the gateway passes its prompt count);
    message_delta carries the exact final usage."""

    def __init__(self, *, model: str | None = None, start_usage: Usage | None = None) -> None:
        self._model = model
        self._start_usage = start_usage or Usage()
        self._open: tuple[int, str] | None = None  # (canonical index, block type)
        self._next_index = 0

    def encode(self, event: StreamEvent) -> bytes:
        if isinstance(event, TextDelta):
            out = self._ensure_block(event.index, "text", {"type": "text", "text": ""})
            return out + self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": self._next_index - 1,
                    "delta": {"type": "text_delta", "text": event.text},
                },
            )
        if isinstance(event, ToolCallDelta):
            out = self._ensure_block(event.index, "tool_use", None)
            return out + self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": self._next_index - 1,
                    "delta": {"type": "input_json_delta", "partial_json": event.arguments_json},
                },
            )
        if isinstance(event, ToolCallStart):
            out = self._close()
            return out + self._start_block(
                event.index,
                "tool_use",
                {"type": "tool_use", "id": event.id, "name": event.name, "input": {}},
            )
        if isinstance(event, StreamStart):
            return self._message_start(event)
        if isinstance(event, ThinkingStart | ThinkingDelta):
            return self._thinking(event)
        if isinstance(event, TextCitation):
            return self._citation(event)
        return self._end(event)

    def _citation(self, event: TextCitation) -> bytes:
        wire = encode_citation(event.citation)
        if wire is None:  # another provider's: no faithful Anthropic form
            return b""
        out = self._ensure_block(event.index, "text", {"type": "text", "text": ""})
        delta = {"type": "citations_delta", "citation": wire}
        return out + self._event(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._next_index - 1, "delta": delta},
        )

    def _thinking(self, event: ThinkingStart | ThinkingDelta) -> bytes:
        if isinstance(event, ThinkingStart):
            block: dict[str, Any] = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if event.redacted_data is None
                else {"type": "redacted_thinking", "data": event.redacted_data}
            )
            return self._close() + self._start_block(event.index, "thinking", block)
        out = self._ensure_block(
            event.index, "thinking", {"type": "thinking", "thinking": "", "signature": ""}
        )
        for kind, key, value in (
            ("thinking_delta", "thinking", event.thinking),
            ("signature_delta", "signature", event.signature),
        ):
            if value:
                delta = {"type": kind, key: value}
                out += self._event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": self._next_index - 1, "delta": delta},
                )
        return out

    def _message_start(self, event: StreamStart) -> bytes:
        model = self._model if self._model is not None else event.model
        start = event.usage if event.usage is not None else self._start_usage
        message: dict[str, Any] = {
            "id": message_id(event.id),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": encode_usage(
                start if event.usage is not None else dataclasses.replace(start, output_tokens=1)
            ),
        }
        return self._event(
            "message_start", {"type": "message_start", "message": message}
        ) + self._event("ping", {"type": "ping"})

    def _ensure_block(self, index: int, kind: str, start: dict[str, Any] | None) -> bytes:
        if self._open is not None and self._open == (index, kind):
            return b""
        out = self._close()
        if start is None:  # arguments for a tool whose start we never saw: open a nameless one
            start = {"type": "tool_use", "id": "", "name": "", "input": {}}
        return out + self._start_block(index, kind, start)

    def _start_block(self, index: int, kind: str, block: dict[str, Any]) -> bytes:
        self._open = (index, kind)
        self._next_index += 1
        return self._event(
            "content_block_start",
            {"type": "content_block_start", "index": self._next_index - 1, "content_block": block},
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return self._event(
            "content_block_stop", {"type": "content_block_stop", "index": self._next_index - 1}
        )

    def _end(self, event: StreamEnd) -> bytes:
        return (
            self._close()
            + self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": STOP_TO_WIRE[event.stop_reason],
                        "stop_sequence": event.stop_sequence,
                    },
                    "usage": encode_usage(event.usage),
                },
            )
            + self._event("message_stop", {"type": "message_stop"})
        )

    @staticmethod
    def _event(name: str, data: dict[str, Any]) -> bytes:
        return frame(orjson.dumps(data), name)
