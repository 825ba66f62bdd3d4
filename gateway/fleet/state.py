"""The fleet's records: what the operator says about a replica (`ReplicaSpec`), the live
counters per replica, provider and call, the stats, and a decision's explanation for the plan.
Plain data; the behaviour lives in `fleet.py` and its parts (`fleet_book.py`, `fleet_health.py`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gateway.fleet.rate import PrefillRate
from gateway.fleet.signals import Counts
from gateway.ports import Attempt, Candidate, RoutePlan
from routing.types import CandidateScore, Decision, ReplicaState, replica_key

# a non-streamed call is a prefill sample only when its answer is at most this many tokens
NONSTREAM_SAMPLE_MAX_OUTPUT = 16


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """What the operator knows about one self-hosted backend's replicas (config)."""

    prefill_tok_s: float = 2000.0  # the starting point; the fleet learns the real rate
    prefill_pinned: bool = False  # True: `prefill_tok_s` is final, nothing is learned
    capacity_tok_s: float = 1000.0
    kv_capacity_blocks: int = 1024  # the bundled engine's default --num-blocks
    base_ttft_s: float = 0.05
    metrics_path: str | None = "/metrics"  # engine load metrics under the server root; None: off
    # calls one replica serves at once; None: what its engine shows (else unbounded)
    max_in_flight: int | None = None


@dataclass(slots=True)
class ReplicaRecord:
    candidate: Candidate
    model: str
    spec: ReplicaSpec
    healthy: bool = True
    drained_until: float = 0.0
    failures: int = 0
    inflight_requests: int = 0
    inflight_tokens: int = 0
    inflight_blocks: int = 0
    done: deque[tuple[float, int]] = field(default_factory=deque)  # (time, work tokens)
    done_tokens: int = 0  # the sum over `done`, kept as it changes (read on every call)
    service_s: float | None = None  # moving mean, first token (else dispatch) to completion
    dispatched: int = 0  # ever, for bringing engine samples up to date
    completed: int = 0
    served_at: float | None = None  # the fleet's clock at its last call that ended well
    # the engine's batch size as its metrics show it: running calls while others wait
    engine_max_in_flight: int | None = None
    prefill: PrefillRate = field(init=False)

    def __post_init__(self) -> None:
        self.prefill = PrefillRate(self.spec.prefill_tok_s, pinned=self.spec.prefill_pinned)

    def counts(self) -> Counts:
        return Counts(self.dispatched, self.completed, self.inflight_blocks)


@dataclass(slots=True)
class ApiRecord:
    candidate: Candidate
    model: str
    cooldown_until: float = 0.0


@dataclass(slots=True)
class InflightCall:
    key: str | None  # replica key; None for an API
    session_id: str
    prompt_tokens: int
    uncached_tokens: int
    predicted_blocks: int
    blocks: int = 0  # KV blocks pinned while in flight
    prefill_released: bool = False
    started_at: float = 0.0  # dispatch, then first token
    dispatched_at: float = 0.0
    queued_tokens: int = 0  # the replica's unfinished prefill tokens at dispatch, ours included
    max_tokens: int = 0  # the answer's bound, as planned
    hashes: tuple[bytes, ...] = ()  # the prompt's blocks, pinned in the index while in flight
    reserved_blocks: int = 0  # the answer's blocks, reserved in the index while in flight
    indexed: bool = True  # False: dispatched to a lone replica, which keeps no prefix index


@dataclass(frozen=True, slots=True)
class FleetStats:
    replicas: tuple[ReplicaState, ...]
    sessions: int
    predicted_cached_tokens: int  # summed over completed self-hosted calls
    reported_cached_tokens: int
    abs_error_tokens: int  # sum of |predicted - reported|: the index's accuracy


def pending_prefills(
    inflight: Iterable[tuple[object, InflightCall]],
    replicas: Mapping[str, ReplicaRecord],
    now: float,
) -> dict[str, list[tuple[int, float]]]:
    """Per replica, the calls whose prefill has not visibly finished: (queued prefill
    tokens at dispatch, seconds since, less the fixed cost). Only calls bounded to a short
    answer count: the fleet cannot tell a streamed call from a non-streamed one, and a
    long non-streamed answer's wait is mostly decode."""
    out: dict[str, list[tuple[int, float]]] = {}
    for _, rec in inflight:
        if rec.key is None or rec.prefill_released:
            continue
        if rec.max_tokens > NONSTREAM_SAMPLE_MAX_OUTPUT:
            continue
        base = replicas[rec.key].spec.base_ttft_s
        out.setdefault(rec.key, []).append((rec.queued_tokens, now - rec.dispatched_at - base))
    return out


def first_score(d: Decision) -> CandidateScore:
    return next(s for s in d.scores if s.backend == d.backend and s.replica == d.replica)


# the reason of a plan with nothing to choose (a lone replica, no index kept: `Fleet._lone`)
ONLY_CANDIDATE = "only_candidate"


def only_candidate_plan(c: Candidate) -> RoutePlan:
    """The plan of a lone replica: no scores (nothing was compared), no fallback."""
    replica = replica_key(c.backend_name, c.replica)
    details = {
        "venue": c.venue,
        "backend": c.backend_name,
        "replica": replica,
        "reason": ONLY_CANDIDATE,
    }
    return RoutePlan((Attempt(c, ONLY_CANDIDATE, indexed=False),), details)


def plan_details(d: Decision) -> dict[str, object]:
    return {
        "venue": d.venue,
        "backend": d.backend,
        "replica": d.replica,
        "reason": d.reason,
        "predicted_cached_tokens": d.predicted_cached_tokens,
        "predicted_ttft_ms": round(d.predicted_ttft_s * 1000, 1),
        "scores": [
            {
                "backend": s.backend,
                "replica": s.replica,
                "venue": s.venue,
                "eligible": s.eligible,
                "cached": s.predicted_cached_tokens,
                "ttft_ms": round(s.predicted_ttft_s * 1000, 1),
                "wait_ms": round(s.admission_wait_s * 1000, 1),
                "stall_ms": round(s.stall_s * 1000, 1),
                "room_blocks": s.room_blocks,
                "usd": round(s.predicted_usd, 6),
                "note": s.note,
            }
            for s in d.scores
        ],
    }


def slowest_learned(records: Iterable[ReplicaRecord], backend: str) -> float:
    """The slowest prefill rate the replicas of `backend` have learned from samples. A replica of
    it with no sample yet starts there instead of at the configured guess: in the end-to-end run
    a fresh replica read 10x faster than its learned sibling and drew six sessions at once."""
    return min(
        r.prefill.tok_s
        for r in records
        if r.candidate.backend_name == backend and r.prefill.num_samples
    )
