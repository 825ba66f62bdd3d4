"""One real gateway for the client suite, in front of the wire-level fake (OpenAI and
Anthropic) whose tool-calling replies drive each framework's tool loop: a user message saying
`call:get_weather` earns a call of that tool, its result earns the fake's nine-word answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

KEY = "lt-clients-secret-key-0001"
CAP = 4096  # under every framework's default max_tokens: those are clamped to it
ANSWER = "The quick brown fox jumps over the lazy dog"
ASK = "What is the weather in Paris? call:get_weather"


@pytest.fixture(scope="package")
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture(scope="package")
def gateway(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    var_dir: Path = tmp_path_factory.mktemp("clients")
    (var_dir / "policies").mkdir()
    write_policy(var_dir / "policies", "acme", KEY, limits={"max_output_tokens": CAP})
    models = models_for(upstream)[:2]  # gpt-4o-mini (OpenAI wire), claude-sonnet-4-5 (Anthropic)
    running = start_gateway(write_config(var_dir / "lantern.yaml", var_dir, models))
    try:
        yield running
    finally:
        running.stop()


class ToolLog:
    """The weather tool every framework runs; it records each call's argument."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get_weather(self, text: str) -> str:
        """Weather for the place named in `text`."""
        self.calls.append(text)
        return "21C and sunny"


@pytest.fixture
def tools() -> ToolLog:
    return ToolLog()


def check_loop(upstream: FakeUpstream, tools: ToolLog, seen_before: int, answer: str) -> None:
    """One tool call with the user's text, then the answer; both calls reached the upstream
    with max_tokens within the cap."""
    assert tools.calls == [ASK]
    assert answer.strip() == ANSWER
    bodies = [
        r.json()
        for r in upstream.requests[seen_before:]
        if r.path.endswith(("/completions", "/messages"))
    ]
    assert len(bodies) == 2
    assert all(b.get("max_tokens", b.get("max_completion_tokens", 0)) <= CAP for b in bodies)
