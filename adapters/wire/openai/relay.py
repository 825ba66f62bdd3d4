"""OpenAI upstream SSE -> the same SSE for an OpenAI client, with only deterministic edits.

When the client and the backend both speak OpenAI, a streamed chunk need not go through
canonical events and back: each `data:` line is forwarded as the upstream framed it. The edits:
`model` set to the name the client asked for (when the upstream's differs); the usage-only chunk
dropped when the client did not ask for it (the backend always asks, to settle quotas), else
given `prompt_tokens_details.cached_tokens` when the upstream left it out; `[DONE]` added when
the upstream ended after a finish_reason without it. Each chunk is parsed once, and the
canonical events decoded from it travel along for counting. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from adapters.backend import RelayedChunk
from adapters.errors import WireFormatError
from adapters.sse import SSEvent, frame
from adapters.types import StreamEvent
from adapters.wire.openai.response import decode_usage
from adapters.wire.openai.stream import DONE, OpenAIStreamDecoder

DONE_DATA = "[DONE]"


class OpenAIRelay:
    """Feed each upstream SSE `data` payload; get the bytes for the client and the events."""

    def __init__(self, backend: str, *, model: str, include_usage: bool) -> None:
        self.decoder = OpenAIStreamDecoder(backend)
        self._model = model
        self._include_usage = include_usage

    @property
    def ended(self) -> bool:
        return self.decoder.ended

    def feed(self, data: str) -> tuple[bytes, list[StreamEvent]]:
        """(bytes to forward, possibly empty; the chunk's canonical events)."""
        if data == DONE_DATA:
            return DONE, self.decoder.finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return b"", self.decoder.feed(data)  # raises the decoder's WireFormatError
        if not isinstance(chunk, dict):
            raise WireFormatError("stream", "chunk is not a JSON object")
        events = self.decoder.feed_chunk(chunk)  # raises on an in-band upstream error
        if chunk.get("usage") or chunk.get("model", self._model) != self._model:
            return self._edited(data, chunk), events
        if "\n" in data:  # the upstream split it over several `data:` lines: so does the client
            return frame(data.encode()), events
        return b"data: " + data.encode() + b"\n\n", events  # nothing to edit: as framed

    def feed_all(self, events: Sequence[SSEvent]) -> tuple[RelayedChunk | None, Exception | None]:
        """Several upstream events (one read) as one chunk for the client (None when none of
        them leaves anything to forward or count), and the error an event raised, if any: what
        came before it in the read is still forwarded and counted. Events after `[DONE]` and
        after an error are ignored."""
        parts: list[bytes] = []
        decoded: list[StreamEvent] = []
        error: Exception | None = None
        for event in events:
            if self.decoder.ended:
                break
            try:
                data, more = self.feed(event.data)
            except Exception as exc:  # an in-band upstream error or a broken chunk
                error = exc
                break
            if data:
                parts.append(data)
            decoded += more
        if not parts and not decoded:
            return None, error
        return RelayedChunk(b"".join(parts), tuple(decoded)), error

    def finish(self) -> tuple[bytes, list[StreamEvent]]:
        """The upstream ended without `[DONE]` (after a finish_reason): end the client's too."""
        return DONE, self.decoder.finish()

    def _edited(self, data: str, chunk: dict[str, Any]) -> bytes:
        usage = chunk.get("usage")
        if isinstance(usage, dict) and usage and not chunk.get("choices"):  # usage-only chunk
            if not self._include_usage:
                return b""
            if not _has_cached_tokens(usage):
                details = usage.get("prompt_tokens_details")
                details = details if isinstance(details, dict) else {}
                cached = decode_usage(usage).cache_read_tokens
                details = {**details, "cached_tokens": cached}
                chunk["usage"] = {**usage, "prompt_tokens_details": details}
                return self._reencoded(chunk)
        if "model" in chunk and chunk["model"] != self._model:
            return self._reencoded(chunk)
        return frame(data.encode())

    def _reencoded(self, chunk: dict[str, Any]) -> bytes:
        if "model" in chunk:
            chunk["model"] = self._model
        return frame(orjson.dumps(chunk))


def _has_cached_tokens(usage: dict[str, Any]) -> bool:
    details = usage.get("prompt_tokens_details")
    return isinstance(details, dict) and "cached_tokens" in details
