"""Who the slowest calls of a fleet simulation are (`bench.fleet_sim --trace`): how the router
placed them, what it predicted, and where their time went, against all calls; how often
sessions moved, bounced between replicas, or moved to a replica that kept them waiting; and how
far the fleet's view of each engine (sample brought up to date) was from the engine's truth."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    lines.append(move_report(traced))
    return lines


def move_report(traced: Sequence[Req], late_s: float = 0.5) -> str:
    """Moves among the traced calls, per session in arrival order: how many came within two
    calls of the session's previous move (bounces), went back to a replica it had used, or
    waited for admission more than `late_s` beyond the predicted wait (a target that could
    not admit it either)."""
    by_session: dict[str, list[Req]] = {}
    for q in sorted(traced, key=lambda q: q.arrival):
        by_session.setdefault(q.session.sid, []).append(q)
    moves = bounces = back = late = 0
    for calls in by_session.values():
        last_move = None
        for i, q in enumerate(calls):
            if q.attempt is None or q.attempt.reason != "sticky_broken_gate":
                continue
            moves += 1
            bounces += last_move is not None and i - last_move <= 2
            used = {c.attempt.candidate.replica for c in calls[:i] if c.attempt is not None}
            back += q.attempt.candidate.replica in used
            waited = (q.admitted_at or q.arrival) - q.arrival
            late += waited > q.predicted_wait + late_s
            last_move = i
    return (
        f"moves: {moves}; within two calls of the session's previous move: {bounces};"
        f" back to a replica it used before: {back};"
        f" admitted more than {late_s:g} s later than predicted: {late}"
    )


@dataclass(frozen=True, slots=True)
class SignalError:
    """At one decision, one replica: the fleet's view less the engine's true state."""

    sample_queued: bool  # the engine sample the view starts from showed requests waiting
    free_blocks: int  # brought-up-to-date free KV less the engine's (capacity - held by running)
    queue_depth: int  # brought-up-to-date waiting requests less the engine's


def signal_report(errors: Sequence[SignalError]) -> str:
    """Bias (mean error) and mean absolute error of the view's free KV, apart for samples
    that showed a queue and those that did not, and of its waiting requests."""
    parts = []
    for label, queued in (("a queue", True), ("no queue", False)):
        free = [e.free_blocks for e in errors if e.sample_queued == queued]
        if free:
            parts.append(
                f"free KV where the sample showed {label}: bias {_mean(free):+.1f},"
                f" mean abs {_mean(abs(x) for x in free):.1f} blocks ({len(free)})"
            )
    queue = [e.queue_depth for e in errors]
    if queue:
        parts.append(
            f"waiting requests: bias {_mean(queue):+.2f}, mean abs {_mean(abs(x) for x in queue):.2f}"
        )
    return "engine view at decisions, less the truth: " + ("; ".join(parts) or "no signal")


def _kind(q: Req) -> str:
    reason = q.attempt.reason if q.attempt is not None else "?"
    if q.first_turn:
        return "first call (" + ("fork" if q.session.forked else "new") + ")"
    return {"sticky": "stayed", "sticky_broken_gate": "moved"}.get(reason, reason)


def _mean(values: Iterable[float]) -> float:
    vs = list(values)
    return statistics.fmean(vs) if vs else 0.0
