"""A Responses API upstream's replies -> canonical types, for a backend that forwards the
Responses door natively: the reply object, and its SSE events relayed as they came, each with
the canonical events it carries (for counting and settling, never re-encoded). No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from adapters.backend import RelayedChunk
from adapters.errors import ProviderUnavailable, WireFormatError
from adapters.sse import SSEvent, frame
from adapters.types import (
    JSON,
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
from adapters.wire.json_fields import expect

_DONE_EVENTS = frozenset({"response.completed", "response.incomplete"})


def decode_usage(usage: Mapping[str, Any] | None) -> Usage:
    """Responses usage -> canonical: `input_tokens` includes the cached ones."""
    if not usage:
        return Usage()
    details = usage.get("input_tokens_details") or {}
    read = details.get("cached_tokens") or 0
    write = details.get("cache_write_tokens") or 0
    out = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=max((usage.get("input_tokens") or 0) - read - write, 0),
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reasoning_tokens=out.get("reasoning_tokens") or 0,
    )


def stop_reason(reply: Mapping[str, Any]) -> StopReason:
    if reply.get("status") == "incomplete":
        return "length"
    calls = any(i.get("type") == "function_call" for i in reply.get("output") or ())
    return "tool_use" if calls else "stop"


def decode_reply(reply: Mapping[str, Any]) -> ChatResponse:
    """The canonical view of a reply object; the object itself travels along as `native`."""
    content: list[TextPart | ToolUsePart] = []
    for i, item in enumerate(expect(reply.get("output"), list, "output")):
        kind = expect(item, dict, f"output[{i}]").get("type")
        if kind == "message":
            text = "".join(str(p.get("text", "")) for p in item.get("content") or ())
            content.append(TextPart(text))
        elif kind == "function_call":
            call = ToolUsePart(str(item["call_id"]), str(item["name"]), str(item["arguments"]))
            content.append(call)
    return ChatResponse(
        id=str(reply.get("id", "")),
        model=str(reply.get("model", "")),
        content=tuple(content),
        stop_reason=stop_reason(reply),
        usage=decode_usage(reply.get("usage")),
        native=reply,
    )


def door_edits(body: Mapping[str, Any], model: str) -> dict[str, JSON]:
    """What the door says differently from the upstream in a response object: the client's
    model name, and the continuation and storage it asked for (the upstream was sent neither)."""
    return {
        "model": model,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store") is not False,
    }


class ResponsesRelay:
    """Feed the upstream's SSE events; get them framed as they came, with canonical events.
    An event that carries the response object gets `edits` (`door_edits`) set in it."""

    def __init__(self, backend: str, edits: Mapping[str, JSON] | None = None) -> None:
        self._backend = backend
        self._edits = edits or {}
        self._blocks: dict[int, int] = {}  # output_index -> canonical block index
        self.ended = False

    def feed_all(self, events: Sequence[SSEvent]) -> RelayedChunk | None:
        parts: list[bytes] = []
        decoded: list[StreamEvent] = []
        for event in events:
            if self.ended:
                break
            payload = _payload(event.data)
            kind = str(payload.get("type") or event.event)
            decoded += self._events(kind, payload)
            parts.append(frame(self._edited(event.data, payload), kind))
        if not parts:
            return None
        return RelayedChunk(b"".join(parts), tuple(decoded), format="responses")

    def _edited(self, data: str, payload: dict[str, Any]) -> bytes:
        response = payload.get("response")
        if not self._edits or not isinstance(response, dict):
            return data.encode()
        if all(response.get(k) == v for k, v in self._edits.items()):
            return data.encode()
        return orjson.dumps({**payload, "response": {**response, **self._edits}})

    def _events(self, kind: str, data: dict[str, Any]) -> list[StreamEvent]:
        if kind == "response.created":
            response = data.get("response") or {}
            return [StreamStart(str(response.get("id", "")), str(response.get("model", "")))]
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            block = self._blocks[data.get("output_index", 0)] = len(self._blocks)
            if item.get("type") == "function_call":
                return [ToolCallStart(block, str(item.get("call_id")), str(item.get("name")))]
            return []
        if kind == "response.output_text.delta":
            return [TextDelta(self._blocks[data.get("output_index", 0)], str(data["delta"]))]
        if kind == "response.function_call_arguments.delta":
            return [ToolCallDelta(self._blocks[data.get("output_index", 0)], str(data["delta"]))]
        if kind in _DONE_EVENTS:
            self.ended = True
            response = data.get("response") or {}
            return [StreamEnd(stop_reason(response), decode_usage(response.get("usage")))]
        if kind in ("error", "response.failed"):
            raise ProviderUnavailable(self._backend, f"upstream stream failed: {kind}")
        return []


def _payload(data: str) -> dict[str, Any]:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise WireFormatError("stream", "event is not JSON") from exc
    if not isinstance(payload, dict):
        raise WireFormatError("stream", "event is not a JSON object")
    return payload
