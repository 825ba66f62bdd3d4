"""`TokenCounting` port over the tiktoken counter in adapters (prompt caps, reservations).

Give it the counter the prompt cache encodes with: both then read one memo of token ids."""

from __future__ import annotations

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.types import ChatRequest


class TiktokenCounting:
    def __init__(self, counter: TokenCounter | None = None) -> None:
        self._counter = counter or TokenCounter(TokenIdsMemo())

    def count_prompt(self, request: ChatRequest) -> int:
        return self._counter.count_request(request)

    def count_text(self, model: str, text: str) -> int:
        return self._counter.count_text(model, text)

    @property
    def counter(self) -> TokenCounter:
        return self._counter
