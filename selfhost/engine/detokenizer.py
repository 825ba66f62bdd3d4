"""Incremental detokenization with stop strings: emits only text that can no longer change.

Holds back an incomplete UTF-8 tail and any suffix that could still grow into a stop string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class Decoder(Protocol):
    def decode(self, token_ids: list[int]) -> str: ...


@dataclass
class IncrementalDetokenizer:
    decoder: Decoder
    stop: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    num_emitted_chars: int = 0
    stopped: bool = False

    def add(self, token_id: int) -> str:
        """Append one generated token; return the newly final text (sets `stopped` on a stop string)."""
        self.token_ids.append(token_id)
        text = self.decoder.decode(self.token_ids)
        stop_at = self._find_stop(text)
        if stop_at is not None:
            self.stopped = True
            return self._emit(text, stop_at)
        if text.endswith("\ufffd"):
            return ""  # a multi-byte character is not complete yet
        return self._emit(text, len(text) - self._held_back(text))

    def flush(self) -> str:
        """All remaining text, when the request ends for another reason."""
        if self.stopped:
            return ""
        text = self.decoder.decode(self.token_ids)
        return self._emit(text, len(text))

    def _emit(self, text: str, end: int) -> str:
        new = text[self.num_emitted_chars : end] if end > self.num_emitted_chars else ""
        self.num_emitted_chars = max(self.num_emitted_chars, end)
        return new

    def _find_stop(self, text: str) -> int | None:
        longest = max((len(s) for s in self.stop), default=0)
        search_from = max(0, self.num_emitted_chars - longest)
        hits = [i for i in (text.find(s, search_from) for s in self.stop if s) if i >= 0]
        return min(hits) if hits else None

    def _held_back(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        held = 0
        for stop in self.stop:
            for size in range(min(len(stop) - 1, len(text)), held, -1):
                if text.endswith(stop[:size]):
                    held = size
                    break
        return held
