"""Anthropic upstream SSE -> the same SSE for an Anthropic client, with one edit.

When the client and the backend both speak Anthropic, every event is forwarded as the upstream
framed it, in its order, known or not (server tools and their results, citations and
`citations_delta`, future block and event types): the one edit is `message_start`'s `model`,
set to the name the client asked for when the upstream's differs. Each event is parsed once,
and the canonical events decoded from it travel along for counting. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from adapters.backend import RelayedChunk
from adapters.errors import WireFormatError
from adapters.sse import SSEvent, frame
from adapters.types import StreamEvent
from adapters.wire.anthropic.stream import AnthropicStreamDecoder


class AnthropicRelay:
    """Feed each upstream SSE event; get the bytes for the client and the canonical events."""

    def __init__(self, backend: str, *, model: str) -> None:
        self.decoder = AnthropicStreamDecoder(backend)
        self._model = model

    @property
    def ended(self) -> bool:
        return self.decoder.ended

    def feed(self, sse: SSEvent) -> tuple[bytes, list[StreamEvent]]:
        """(bytes to forward; the event's canonical events). An upstream `error` event raises
        (the client gets it in-band from the door, as every stream error)."""
        try:
            event = orjson.loads(sse.data)
        except orjson.JSONDecodeError as exc:
            raise WireFormatError("stream", "event data is not JSON") from exc
        if not isinstance(event, dict):
            raise WireFormatError("stream", "event data is not a JSON object")
        decoded = self.decoder.feed_event(event)
        name = sse.event or None
        message = event.get("message") if event.get("type") == "message_start" else None
        if isinstance(message, dict) and message.get("model", self._model) != self._model:
            event["message"] = {**message, "model": self._model}
            return frame(orjson.dumps(event), name), decoded
        return frame(sse.data.encode(), name), decoded

    def feed_all(self, events: Sequence[SSEvent]) -> tuple[RelayedChunk | None, Exception | None]:
        """Several upstream events (one read) as one chunk for the client, and the error an
        event raised, if any: what came before it is still forwarded and counted. Events after
        `message_stop` are ignored."""
        parts: list[bytes] = []
        decoded: list[StreamEvent] = []
        error: Exception | None = None
        for event in events:
            if self.decoder.ended:
                break
            try:
                data, more = self.feed(event)
            except Exception as exc:  # an in-band upstream error or a broken event
                error = exc
                break
            parts.append(data)
            decoded += more
        if not parts:
            return None, error
        return RelayedChunk(b"".join(parts), tuple(decoded)), error
