"""Canonical stream events -> Responses API SSE events (`response.created` ... `response.completed`).

One stateful encoder per reply; no I/O. Each canonical block (text, or one tool call) becomes one
output item, in order of first appearance; items are closed together when the model is done,
because a backend may interleave the argument deltas of parallel tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from adapters.sse import frame
from adapters.types import (
    JSON,
    Citation,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextCitation,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingStart,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
)
from adapters.wire.responses.items import function_call_item, message_item, url_citations
from adapters.wire.responses.response import finished


@dataclass(slots=True)
class _Item:
    output_index: int
    item_id: str
    call: ToolUsePart | None = None  # None: a message item
    chunks: list[str] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def annotations(self) -> list[dict[str, JSON]]:
        if not self.citations:
            return []
        return url_citations([TextPart(self.text, citations=tuple(self.citations))])

    def done(self) -> dict[str, JSON]:
        if self.call is None:
            return message_item(self.item_id, self.text, annotations=self.annotations())
        whole = ToolUsePart(self.call.id, self.call.name, self.text)
        return function_call_item(self.item_id, whole)


class ResponsesStreamEncoder:
    """Feed canonical events; get the client's SSE bytes. `final` is the finished response."""

    def __init__(self, base: dict[str, Any]) -> None:
        self._base = base
        self._prefix = str(base["id"]).removeprefix("resp_")
        self._sequence = 0
        self._items: dict[int, _Item] = {}  # canonical block index -> item
        self.final: dict[str, Any] | None = None

    def encode(self, event: StreamEvent) -> bytes:
        if isinstance(event, TextDelta):
            return self._text(event)
        if isinstance(event, ToolCallDelta):
            item = self._items[event.index]
            item.chunks.append(event.arguments_json)
            return self._event(
                "response.function_call_arguments.delta",
                item_id=item.item_id,
                output_index=item.output_index,
                delta=event.arguments_json,
            )
        if isinstance(event, ToolCallStart):
            return self._tool_start(event)
        if isinstance(event, StreamStart):
            return self._event("response.created", response=self._base) + self._event(
                "response.in_progress", response=self._base
            )
        if isinstance(event, ThinkingStart | ThinkingDelta):
            return b""  # a translated backend's thinking is not a Responses reasoning item
        if isinstance(event, TextCitation):  # annotated once the text is whole (`_close`)
            item, out = self._message(event.index)
            item.citations.append(event.citation)
            return out
        return self._end(event)

    def error(self, code: str | None, message: str, param: str | None) -> bytes:
        """An in-band error once the stream has started (OpenAI's `error` event)."""
        return self._event("error", code=code, message=message, param=param)

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return frame(orjson.dumps(payload), kind)

    def _new_item(self, index: int, item_id: str, call: ToolUsePart | None) -> _Item:
        item = self._items[index] = _Item(len(self._items), item_id, call)
        return item

    def _message(self, index: int) -> tuple[_Item, bytes]:
        """The message item of block `index`, and the events that open it if it is new."""
        item = self._items.get(index)
        out = b""
        if item is None:
            item = self._new_item(index, f"msg_{self._prefix}_{len(self._items)}", None)
            out += self._event(
                "response.output_item.added",
                output_index=item.output_index,
                item=message_item(item.item_id, "", "in_progress"),
            )
            out += self._event(
                "response.content_part.added",
                item_id=item.item_id,
                output_index=item.output_index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            )
        return item, out

    def _text(self, event: TextDelta) -> bytes:
        item, out = self._message(event.index)
        item.chunks.append(event.text)
        return out + self._event(
            "response.output_text.delta",
            item_id=item.item_id,
            output_index=item.output_index,
            content_index=0,
            delta=event.text,
            logprobs=[],
        )

    def _tool_start(self, event: ToolCallStart) -> bytes:
        call = ToolUsePart(event.id, event.name, "")
        item = self._new_item(event.index, f"fc_{self._prefix}_{len(self._items)}", call)
        return self._event(
            "response.output_item.added",
            output_index=item.output_index,
            item=function_call_item(item.item_id, call, "in_progress"),
        )

    def _close(self, item: _Item) -> bytes:
        where = {"item_id": item.item_id, "output_index": item.output_index}
        done = item.done()
        if item.call is None:
            part = done["content"][0]  # type: ignore[index]
            out = b"".join(
                self._event(
                    "response.output_text.annotation.added",
                    **where,
                    content_index=0,
                    annotation_index=i,
                    annotation=note,
                )
                for i, note in enumerate(part["annotations"])
            )
            out += self._event("response.output_text.done", **where, content_index=0,
                               text=item.text, logprobs=[])  # fmt: skip
            out += self._event("response.content_part.done", **where, content_index=0, part=part)
        else:
            out = self._event(
                "response.function_call_arguments.done",
                **where,
                name=item.call.name,
                arguments=item.text,
            )
        return out + self._event(
            "response.output_item.done", output_index=item.output_index, item=done
        )

    def _end(self, event: StreamEnd) -> bytes:
        items = sorted(self._items.values(), key=lambda i: i.output_index)
        out = b"".join(self._close(item) for item in items)
        self.final = finished(self._base, [i.done() for i in items], event.stop_reason, event.usage)
        kind = (
            "response.incomplete" if self.final["status"] == "incomplete" else "response.completed"
        )
        return out + self._event(kind, response=self.final)
