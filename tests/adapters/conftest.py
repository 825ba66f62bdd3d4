"""Fixtures for adapter tests: a running wire-level fake upstream per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.upstream import FakeUpstream


class HalfCached:
    """A PromptCacheModel fake: half the prompt read from cache, 3 tokens written, rest new."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def account(
        self, wire: str, body: dict, prompt_tokens: int, api_key: str = ""
    ) -> tuple[int, int, int]:
        self.calls.append((wire, prompt_tokens))
        read = prompt_tokens // 2
        return prompt_tokens - read - 3, read, 3


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def cached_upstream() -> Iterator[tuple[FakeUpstream, HalfCached]]:
    cache = HalfCached()
    with FakeUpstream(cache) as server:
        yield server, cache
