"""bench/agent_sessions: the note's miss rule, exact session sizes, and the table reproduced."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.agent_sessions import (
    FIRST_CONTEXT,
    NORMALISED,
    NOTE_TABLE,
    STEP,
    Direct,
    GatewayBench,
    InProcessLantern,
    Session,
    fresh,
    miss_calls,
    run_session,
)


def test_miss_calls_follow_the_note() -> None:
    assert miss_calls(0) == frozenset()
    assert miss_calls(1) == {19}
    assert miss_calls(2) == {9, 19}
    assert miss_calls(5) == {3, 7, 11, 15, 19}
    assert miss_calls(10) == {1, 3, 5, 7, 9, 11, 13, 15, 17, 19}
    assert miss_calls(19) == set(range(1, 20))


def test_session_sizes_are_exact() -> None:
    session = Session("clean")
    sizes = [session.prompt_tokens(session.body(t)) for t in range(3)]
    assert sizes == [FIRST_CONTEXT, FIRST_CONTEXT + STEP, FIRST_CONTEXT + 2 * STEP]


@pytest.mark.slow
@pytest.mark.parametrize("num_misses", [0, 1, 5])
def test_table_reproduced_through_lantern(num_misses: int) -> None:
    result = run_session(
        "t", "clean", *fresh(InProcessLantern.factory(NORMALISED)), miss_calls(num_misses)
    )
    assert result.uncached_cost == 405_000
    assert round(result.percent, 1) == NOTE_TABLE[num_misses]


@pytest.mark.slow
def test_timestamp_client_is_fixed_by_relocation() -> None:
    plain = run_session("t", "timestamp", *fresh(lambda fake, clock: Direct(fake)))
    lantern = run_session("t", "timestamp", *fresh(InProcessLantern.factory(NORMALISED)))
    assert round(plain.percent, 1) == 125.0  # every call rewrites the whole prompt
    assert abs(lantern.percent - 19.8) < 1.0


@pytest.mark.slow
def test_through_the_gateway_misses_cost_and_are_diagnosed(tmp_path: Path) -> None:
    """Two forced misses through a real gateway on the bench's simulated clock: the note's
    34.3 %, and the gateway names both misses `ttl_expired` in `x-lantern-cache`."""
    bench = GatewayBench(tmp_path)
    try:
        hop, clock = fresh(bench.factory("lantern"))
        result = run_session("t", "clean", hop, clock, miss_calls(2))
    finally:
        bench.close()
    assert round(result.percent, 1) == NOTE_TABLE[2]
    verdicts = [header.split(";")[0] for header in hop.headers_seen]  # type: ignore[attr-defined]
    assert verdicts == ["first_call"] + ["kept"] * 8 + ["ttl_expired"] + ["kept"] * 9 + [
        "ttl_expired"
    ]
