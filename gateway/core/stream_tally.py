"""What one streamed answer produced: its usage (counted from the text when the stream broke
before reporting it), its first-token time, and the answer as the client will echo it back."""

from __future__ import annotations

from adapters.types import (
    Message,
    StreamEnd,
    StreamEvent,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
    Usage,
)
from gateway.ports import TokenCounting


class StreamTally:
    """Counts what a stream produced, so a broken stream still settles to the truth."""

    def __init__(self, model: str, counter: TokenCounting, scope: str) -> None:
        self.model = model
        self.counter = counter
        self.scope = scope  # the tenant: its memo entries alone are read
        self.text: list[str] = []  # every text and tool-argument piece, in order (counting)
        self.final: Usage | None = None
        self.ttft_s: float | None = None
        self.started = False
        self.said_model: str | None = None  # the model the upstream's start event names
        self.stop_reason: str | None = None
        self.ended = False  # the end event went out: the consumer has the whole reply
        self._texts: dict[int, list[str]] = {}  # content block index -> its text pieces
        self._tools: dict[int, tuple[str, str, list[str]]] = {}  # index -> id, name, arguments

    def see(self, event: StreamEvent, elapsed_s: float) -> bool:
        """Take one event; True when it is the first token."""
        if not self.started:
            self.started = True
            self.said_model = getattr(event, "model", None)  # a StreamStart's
        is_first = False
        if isinstance(event, TextDelta | ToolCallDelta):
            if self.ttft_s is None:
                self.ttft_s, is_first = elapsed_s, True
            if isinstance(event, TextDelta):
                self.text.append(event.text)
                self._texts.setdefault(event.index, []).append(event.text)
            else:
                self.text.append(event.arguments_json)
                if event.index in self._tools:
                    self._tools[event.index][2].append(event.arguments_json)
        elif isinstance(event, ThinkingDelta):  # billed as output; not part of the prefix
            if self.ttft_s is None:
                self.ttft_s, is_first = elapsed_s, True
            self.text.append(event.thinking)
        elif isinstance(event, ToolCallStart):
            self._tools[event.index] = (event.id, event.name, [])
        elif isinstance(event, StreamEnd):
            self.final, self.stop_reason = event.usage, event.stop_reason
            self.ended = True
        return is_first

    def usage(self, prompt_tokens: int) -> Usage:
        if self.final is not None:
            return self.final
        text = "".join(self.text)
        produced = self.counter.count_text(self.model, text, self.scope) if text else 0
        return Usage(input_tokens=prompt_tokens, output_tokens=produced)

    def answer(self) -> Message:
        """The assistant message the stream amounts to, content blocks in index order."""
        parts: list[tuple[int, TextPart | ToolUsePart]] = [
            (i, TextPart("".join(pieces))) for i, pieces in self._texts.items()
        ]
        parts += [
            (i, ToolUsePart(tool_id, name, "".join(args)))
            for i, (tool_id, name, args) in self._tools.items()
        ]
        return Message("assistant", tuple(p for _, p in sorted(parts, key=lambda x: x[0])))
