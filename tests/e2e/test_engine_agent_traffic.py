"""Issue 39 from outside: agent traffic through a real gateway in front of the bundled engine
(CPU, bf16, its kernels) with the openai SDK, 8 at a time. A fixed-seed 48-call sample of the mix
in `bench/engine_agent_traffic.py` (whose 200-call run is recorded in docs/engine.md): no 5xx,
every finished call's JSON parses and validates, a cut call claims no tool call, holds are the
engine's prompt count plus `max_tokens` and cover every settle, the ledger has the engine's
counts, and the gateway logs no overrun. Then forced calls whose budget cannot even hold the
call's tags: the engine's output, tags included, stays within `max_tokens`, so within the hold."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from bench.engine_agent_calls import CallSpec, check_outcome, make_calls
from bench.engine_agent_traffic import (
    OVERRUN,
    Stack,
    bundled_engine,
    check_holds,
    drive,
    engine_gateway,
    ledger_counts,
)

pytestmark = pytest.mark.slow

SEED, NUM_CALLS, CONCURRENCY = 39, 48, 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var_dir = tmp_path_factory.mktemp("agent-traffic")
    with bundled_engine(var_dir) as engine_url, engine_gateway(var_dir, engine_url) as running:
        yield running


def _run(stack: Stack, specs: list[CallSpec]) -> list[str]:
    """Drive `specs` and return every problem: replies, ledger rows, holds, the log."""
    stack.store.held.clear()
    del stack.log.records[:]
    outcomes = asyncio.run(drive(stack.gateway.url, specs, CONCURRENCY))
    ledger = ledger_counts(stack.gateway.settings.database_url, {s.session for s in specs})
    problems = [p for o in outcomes for p in check_outcome(o, ledger.get(o.spec.session))]
    problems += check_holds(stack.store, outcomes)
    return problems + [r for r in stack.log.records if OVERRUN in r]


def test_a_mixed_agent_sample_parses_counts_and_never_overruns(stack: Stack) -> None:
    specs = make_calls(random.Random(SEED), NUM_CALLS)
    assert {s.kind for s in specs} >= {"forced_loose", "required", "json_object", "penalties"}
    assert _run(stack, specs) == []
    assert len(stack.store.held) == NUM_CALLS


def test_a_forced_call_never_outgrows_its_max_tokens(stack: Stack) -> None:
    """The call's `<tool_call>` tags and end token count inside `max_tokens`: budgets of 1 to 13
    tokens (too small for the tags up to ample), streamed and not, never settle over the hold."""
    base = make_calls(random.Random(SEED), 6)
    forced = [s for s in base if s.kind in ("forced_strict", "forced_loose")]
    specs = [
        CallSpec(100 + i, spec.kind, stream, {**spec.body, "max_tokens": budget})
        for i, (spec, budget, stream) in enumerate(
            (spec, budget, stream)
            for spec in forced
            for budget in (1, 2, 3, 5, 8, 13)
            for stream in (False, True)
        )
    ]
    assert _run(stack, specs) == []
    settled = [h.settled_tokens for h in stack.store.held.values()]
    assert len(settled) == len(specs) and None not in settled
