"""Server-sent-event framing: split an upstream byte stream into events, write events as bytes.

Owns only the SSE text format (event/data lines, blank-line separators); knows no JSON schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.records import slot_init


@slot_init
@dataclass(frozen=True, slots=True)
class SSEvent:
    """One event: `event` is the `event:` field (empty when absent), `data` its joined data lines."""

    event: str
    data: str


class SSEParser:
    """Incremental parser: feed it bytes as they arrive, get back the events completed so far."""

    __slots__ = ("_buffer", "_event", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEvent]:
        buffer = self._buffer + chunk
        events: list[SSEvent] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            # each line handled here, not in a method: a call per line was most of the parse
            text = line.decode("utf-8")
            if not text:
                if self._data:
                    events.append(SSEvent(self._event, "\n".join(self._data)))
                    self._data = []
                self._event = ""
            elif text[0] != ":":  # else a comment / keep-alive
                name, _, value = text.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if name == "data":
                    self._data.append(value)
                elif name == "event":
                    self._event = value
        self._buffer = buffer[start:]
        return events

    def close(self) -> list[SSEvent]:
        """Flush a final event that was not followed by a blank line."""
        events = self.feed(b"\n") if self._buffer else []
        if self._data:
            events.append(SSEvent(self._event, "\n".join(self._data)))
            self._event, self._data = "", []
        return events


def frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE event as bytes; each line of `data` its own `data:` line (compact JSON is one;
    a relayed event keeps the lines its upstream split it into)."""
    if b"\n" in data:
        data = data.replace(b"\n", b"\ndata: ")
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"
