"""OpenAI chat-completion chunks (SSE `data:` lines) <-> canonical stream events.

Two small stateful classes, one per direction; no I/O. Canonical block indices are assigned
in order of first appearance (text block, then each tool call).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from adapters.errors import ProviderError, ProviderUnavailable, WireFormatError
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
from adapters.wire.openai.response import (
    FINISH_TO_STOP,
    STOP_TO_FINISH,
    decode_annotations,
    decode_usage,
    encode_usage,
)

DONE = b"data: [DONE]\n\n"


class OpenAIStreamDecoder:
    """Feed each SSE `data` payload; get canonical events. `[DONE]` (or `finish()`) ends it."""

    def __init__(self, backend: str = "openai") -> None:
        self._backend = backend
        self._started = False
        self.ended = False  # read per chunk: an attribute, not a property (set by `finish`)
        self._text_index: int | None = None
        self._tool_index: dict[int, int] = {}  # OpenAI tool_calls[].index -> block index
        self._num_blocks = 0
        self._stop: StopReason = "stop"
        self._saw_finish = False
        self._usage = Usage()

    @property
    def saw_finish_reason(self) -> bool:
        """False means the upstream stopped mid-answer (no choice ever finished)."""
        return self._saw_finish

    def feed(self, data: str) -> list[StreamEvent]:
        if data == "[DONE]":
            return self.finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise WireFormatError("stream", "chunk is not JSON") from exc
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        """One already-parsed chunk (LiteLLM hands out objects, not SSE text)."""
        if "error" in chunk and "choices" not in chunk:
            error = chunk["error"] if isinstance(chunk["error"], dict) else {}
            exc = ProviderUnavailable(self._backend, str(error.get("message", "stream error")))
            exc.provider = ProviderError.read(error)  # its type, code and param reach the client
            raise exc
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(
                StreamStart(id=str(chunk.get("id", "")), model=str(chunk.get("model", "")))
            )
        for choice in chunk.get("choices") or ():
            # each choice read here, not in a method: most chunks are one choice's delta
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._text_index is None:
                    self._text_index = self._new_block()
                events.append(TextDelta(self._text_index, text))
            for call in delta.get("tool_calls") or ():
                self._tool_call(call, events)
            if "annotations" in delta and delta["annotations"]:  # sent by search models
                if self._text_index is None:
                    self._text_index = self._new_block()
                index = self._text_index
                events += (TextCitation(index, c) for c in decode_annotations(delta["annotations"]))
            if choice.get("finish_reason"):
                self._saw_finish = True
                self._stop = FINISH_TO_STOP.get(choice["finish_reason"], "stop")
        if chunk.get("usage"):
            self._usage = decode_usage(chunk["usage"])
        return events

    def _tool_call(self, call: dict[str, Any], events: list[StreamEvent]) -> None:
        position = call.get("index", 0)
        fn = call.get("function") or {}
        block = self._tool_index.get(position)
        if block is None:
            block = self._tool_index[position] = self._new_block()
            events.append(ToolCallStart(block, str(call.get("id", "")), str(fn.get("name", ""))))
        if fn.get("arguments"):
            events.append(ToolCallDelta(block, fn["arguments"]))

    def _new_block(self) -> int:
        self._num_blocks += 1
        return self._num_blocks - 1

    def finish(self) -> list[StreamEvent]:
        """End of stream: the final event with the stop reason and usage seen so far."""
        if self.ended:
            return []
        self.ended = True
        events: list[StreamEvent] = [] if self._started else [StreamStart("", "")]
        events.append(StreamEnd(self._stop, self._usage))
        return events


class OpenAIStreamEncoder:
    """Canonical events -> OpenAI SSE bytes for the client; honours `include_usage`."""

    def __init__(
        self, *, include_usage: bool, created: int | None = None, model: str | None = None
    ) -> None:
        self._include_usage = include_usage
        self._created = int(time.time()) if created is None else created
        self._model = model
        self._id = ""
        self._tool_position: dict[int, int] = {}  # block index -> OpenAI tool_calls index

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self._include_usage:
            chunk["usage"] = None
        return frame(orjson.dumps(chunk))

    def encode(self, event: StreamEvent) -> bytes:
        if isinstance(event, TextDelta):
            return self._chunk({"content": event.text})
        if isinstance(event, ThinkingStart | ThinkingDelta):
            return b""  # OpenAI's chat format has no thinking blocks
        if isinstance(event, ToolCallDelta):
            position = self._tool_position.get(event.index, 0)
            return self._chunk(
                {
                    "tool_calls": [
                        {"index": position, "function": {"arguments": event.arguments_json}}
                    ]
                }
            )
        if isinstance(event, ToolCallStart):
            position = self._tool_position[event.index] = len(self._tool_position)
            return self._chunk(
                {
                    "tool_calls": [
                        {
                            "index": position,
                            "id": event.id,
                            "type": "function",
                            "function": {"name": event.name, "arguments": ""},
                        }
                    ]
                }
            )
        if isinstance(event, StreamStart):
            self._id = event.id
            if self._model is None:
                self._model = event.model
            return self._chunk({"role": "assistant", "content": ""})
        if isinstance(event, TextCitation):
            return b""  # OpenAI's chunk schema has no annotations (the final reply has)
        return self._end(event)

    def _end(self, event: StreamEnd) -> bytes:
        out = self._chunk({}, STOP_TO_FINISH[event.stop_reason])
        if self._include_usage:
            out += frame(
                orjson.dumps(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self._model,
                        "choices": [],
                        "usage": encode_usage(event.usage),
                    }
                )
            )
        return out + DONE
