"""The acceptance run of the cache autopilot on outside traces (bench/traces/outside/): each
session replayed through a real `lantern serve` (DEFAULT tenant cache policy) with the official
SDKs, against the provider prompt-cache fake, and held to three properties: it costs no more
than without Lantern, it is within 1 percentage point (of its uncached cost) of its ideal, and
no call read a cache entry another tenant wrote.

    python -m bench.agent_sessions.outside
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_sessions.outside_serve import OutsideGateway
from bench.agent_sessions.outside_traces import (
    Call,
    direct_costs,
    groups,
    ideal_costs,
    load,
    uncached,
)

MAX_GAP_POINTS = 1.0


@dataclass(frozen=True, slots=True)
class SessionResult:
    session: str
    route: str
    tenant: str
    num_calls: int
    uncached: int  # prompt tokens: the cost with no cache at all
    with_lantern: float  # input-token units, as the provider fake billed them
    without: float
    # the calls with a prefix stable from the first call, each marking its whole prompt (an
    # oracle of content, not of the future: it does not know which call is last or comes
    # before a history edit); what a gateway can reach, and what the 1 point is held against
    ideal: float
    clairvoyant: float  # the same oracle knowing the future: writes only what a later call reads
    cross_reads: int  # calls that read an entry another tenant wrote
    verdicts: str

    def percent(self, cost: float) -> float:
        return 100.0 * cost / self.uncached

    @property
    def gap_points(self) -> float:
        return self.percent(self.with_lantern) - self.percent(self.ideal)

    def failures(self) -> list[str]:
        """The properties this session breaks (none: it passes)."""
        broken = []
        if self.with_lantern > self.without + 1e-9:
            broken.append("costs more than without Lantern")
        if self.gap_points > MAX_GAP_POINTS:
            broken.append(f"{self.gap_points:.2f} points over its ideal")
        if self.cross_reads:
            broken.append(f"{self.cross_reads} cross-tenant reads")
        return broken


def run(
    calls: list[Call] | None = None, cache: dict[str, Any] | None = None
) -> list[SessionResult]:
    """`cache`: both tenants' `cache:` policy section; None is the default policy."""
    calls = calls if calls is not None else load()
    without = direct_costs(_ordered(calls), stable=False)
    ideal = ideal_costs(calls, foresight=False)
    clairvoyant = ideal_costs(calls)
    plain = uncached(calls)
    results = []
    with tempfile.TemporaryDirectory(prefix="lantern-outside-") as tmp:
        gateway = OutsideGateway(Path(tmp), cache)
        try:
            for group in groups(calls).values():
                for session, served in gateway.replay(group).items():
                    mine = [c for c in group if c.session == session]
                    verdicts = Counter(h.split(";")[0] for h in served.headers)
                    results.append(
                        SessionResult(
                            session,
                            mine[0].route,
                            mine[0].tenant,
                            len(mine),
                            plain[session],
                            sum(c.cost() for c in served.calls),
                            without[session],
                            ideal[session],
                            clairvoyant[session],
                            sum(c.is_cross_read() for c in served.calls),
                            ", ".join(f"{r} x{n}" for r, n in verdicts.most_common()),
                        )
                    )
        finally:
            gateway.close()
    return results


def _ordered(calls: list[Call]) -> list[Call]:
    return [c for group in groups(calls).values() for c in group]


def table(results: list[SessionResult]) -> str:
    rows = [
        "| session | route | calls | with Lantern | without | ideal | over ideal "
        "| clairvoyant | cross-tenant reads | verdicts | fails |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        rows.append(
            f"| {r.session} | {r.route} | {r.num_calls} | {r.percent(r.with_lantern):.2f} % "
            f"| {r.percent(r.without):.2f} % | {r.percent(r.ideal):.2f} % "
            f"| {r.gap_points:+.2f} | {r.percent(r.clairvoyant):.2f} % "
            f"| {r.cross_reads} | {r.verdicts} "
            f"| {'; '.join(r.failures()) or '-'} |"
        )
    return "\n".join(rows)


def main() -> None:
    print(table(run()))


if __name__ == "__main__":
    main()
