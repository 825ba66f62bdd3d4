"""`TokenCounting` port over the tiktoken counter in adapters (prompt caps, reservations)."""

from __future__ import annotations

from adapters.tokens import TokenCounter
from adapters.types import ChatRequest


class TiktokenCounting:
    def __init__(self, counter: TokenCounter | None = None) -> None:
        self._counter = counter or TokenCounter()

    def count_prompt(self, request: ChatRequest) -> int:
        return self._counter.count_request(request)

    def count_text(self, model: str, text: str) -> int:
        return self._counter.count_text(model, text)
