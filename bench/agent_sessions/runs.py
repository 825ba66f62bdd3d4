"""Sessions run against a fresh fake, each run's cost relative to no caching, and the two
tables (forced misses against the note, messy clients with and without normalisation).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from bench.agent_sessions.hops import Clock, Hop, HopFactory
from bench.agent_sessions.session import NUM_CALLS, Messy, Session
from tests.fakes.prompt_cache import PromptCacheFake

TOOL_TIME_S = 20.0  # seconds between calls while a tool runs
EXPIRED_GAP_S = 301.0  # past the 5-minute lifetime: the cache is lost
NOTE_TABLE = {0: 19.8, 1: 29.2, 2: 34.3, 5: 49.6, 10: 75.2, 19: 125.0}


def miss_calls(num_misses: int) -> frozenset[int]:
    """The note's rule: misses spread evenly over calls 1..19, the last call always one."""
    if num_misses == 0:
        return frozenset()
    step = math.ceil((NUM_CALLS - 1) / num_misses)
    return frozenset(NUM_CALLS - 1 - k * step for k in range(num_misses))


@dataclass(frozen=True, slots=True)
class RunResult:
    label: str
    cost: float
    uncached_cost: int
    calls: tuple[tuple[int, int, int], ...]

    @property
    def percent(self) -> float:
        return 100.0 * self.cost / self.uncached_cost


def run_session(
    label: str, messy: Messy, hop: Hop, clock: Clock, misses: frozenset[int] = frozenset()
) -> RunResult:
    session = Session(messy)
    cost, baseline, calls = 0.0, 0, []
    for t in range(NUM_CALLS):
        body = session.body(t)
        prompt = session.prompt_tokens(body)
        clock.now_s += EXPIRED_GAP_S if t in misses else TOOL_TIME_S
        uncached, read, write = hop.send(body, prompt)
        cost += uncached + 0.1 * read + 1.25 * write
        baseline += prompt
        calls.append((uncached, read, write))
    return RunResult(label, cost, baseline, tuple(calls))


def fresh(factory: HopFactory) -> tuple[Hop, Clock]:
    clock = Clock()
    return factory(PromptCacheFake(clock), clock), clock


def miss_table(factory: HopFactory) -> list[tuple[int, float, float]]:
    rows = []
    for m, note in NOTE_TABLE.items():
        hop, clock = fresh(factory)
        result = run_session(f"{m} misses", "clean", hop, clock, miss_calls(m))
        rows.append((m, result.percent, note))
    return rows


@dataclass(frozen=True, slots=True)
class MessyRow:
    client: Messy
    passed_through: RunResult
    with_lantern: RunResult
    passthrough_diagnoses: str
    lantern_diagnoses: str


def diagnoses(hop: Hop) -> str:
    """Lantern's x-lantern-cache verdicts over calls 1..19 (gateway hop only), e.g. "kept x19"."""
    seen = getattr(hop, "headers_seen", [])[1:]
    counts = collections.Counter(h.split(";")[0] for h in seen)
    return ", ".join(f"{reason} x{n}" for reason, n in counts.most_common()) or "-"


def messy_table(passthrough: HopFactory, lantern: HopFactory) -> list[MessyRow]:
    rows = []
    for messy in ("clean", "timestamp", "shuffled_tools", "json_keys"):
        plain_hop, plain_clock = fresh(passthrough)
        plain = run_session(messy, messy, plain_hop, plain_clock)
        lantern_hop, lantern_clock = fresh(lantern)
        normalised = run_session(messy, messy, lantern_hop, lantern_clock)
        rows.append(
            MessyRow(messy, plain, normalised, diagnoses(plain_hop), diagnoses(lantern_hop))
        )
    return rows
