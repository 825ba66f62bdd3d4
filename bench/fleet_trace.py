"""Who the slowest calls of a fleet simulation are (`bench/fleet_sim.py --trace`): how the router
placed them, what it predicted, and where their time went, against all calls."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.fleet_sim import Req


def tail_report(traced: Sequence[Req], share: float = 0.05) -> list[str]:
    """Who the slowest `share` of calls are: how the router placed them (kind), what it
    predicted, and where the time went (admission wait, then prefill), against all calls."""
    calls = sorted(traced, key=lambda q: q.ttft or 0.0)
    tail = calls[int(len(calls) * (1 - share)) :]
    lines = [
        "| calls | kind | n | TTFT s | admission wait s | predicted TTFT s |"
        " predicted wait s | queue ahead | prompt blocks | hit blocks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, group in (("all", calls), (f"slowest {share:.0%}", tail)):
        kinds: dict[str, list[Req]] = {}
        for q in group:
            kinds.setdefault(_kind(q), []).append(q)
        for kind, qs in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            lines.append(
                f"| {label} | {kind} | {len(qs)} | {_mean(q.ttft or 0.0 for q in qs):.2f} |"
                f" {_mean((q.admitted_at or q.arrival) - q.arrival for q in qs):.2f} |"
                f" {_mean(q.predicted_ttft for q in qs):.2f} |"
                f" {_mean(q.predicted_wait for q in qs):.2f} |"
                f" {_mean(q.queue_ahead for q in qs):.1f} |"
                f" {_mean(len(q.prompt) for q in qs):.0f} | {_mean(q.hit_blocks for q in qs):.0f} |"
            )
    windows: dict[int, int] = {}
    for q in tail:
        windows[int(q.arrival // 30) * 30] = windows.get(int(q.arrival // 30) * 30, 0) + 1
    lines.append(
        "slowest calls by 30 s window of arrival: "
        + ", ".join(f"{t}s:{n}" for t, n in sorted(windows.items()))
    )
    return lines


def _kind(q: Req) -> str:
    reason = q.attempt.reason if q.attempt is not None else "?"
    if q.first_turn:
        return "first call (" + ("fork" if q.session.forked else "new") + ")"
    return {"sticky": "stayed", "sticky_broken_gate": "moved"}.get(reason, reason)


def _mean(values: Iterable[float]) -> float:
    vs = list(values)
    return statistics.fmean(vs) if vs else 0.0
