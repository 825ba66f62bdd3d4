"""The stateful fleet behind the pure router: load counters, the session table, the per-replica
prefix index, health checks by real one-token generations, drain and cooldown.

Implements the pipeline's `RoutingPort`; every decision is delegated to `adapters.router.choose`.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from adapters.backend import BackendCall
from adapters.router import choose, session_after
from adapters.routing_index import PrefixIndex
from adapters.routing_types import (
    ApiState,
    CandidateScore,
    Decision,
    FleetSnapshot,
    Prices,
    ReplicaState,
    RequestFeatures,
    SessionEntry,
    SessionTable,
    replica_key,
)
from adapters.types import ChatRequest, Message, TextPart, Usage
from gateway.ports import Attempt, Candidate, ModelRoute, PreparedPrompt, RoutePlan
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """What the operator knows about one self-hosted backend's replicas (config)."""

    prefill_tok_s: float = 2000.0
    capacity_tok_s: float = 1000.0
    kv_capacity_blocks: int = 1024  # the bundled engine's default --num-blocks
    base_ttft_s: float = 0.05


@dataclass(slots=True)
class _Replica:
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


@dataclass(slots=True)
class _Api:
    candidate: Candidate
    model: str
    cooldown_until: float = 0.0


@dataclass(slots=True)
class _Inflight:
    key: str | None  # replica key; None for an API
    session_id: str
    prompt_tokens: int
    uncached_tokens: int
    predicted_blocks: int
    blocks: int = 0  # KV blocks pinned while in flight
    prefill_released: bool = False


@dataclass(frozen=True, slots=True)
class FleetStats:
    replicas: tuple[ReplicaState, ...]
    sessions: int
    predicted_cached_tokens: int  # summed over completed self-hosted calls
    reported_cached_tokens: int
    abs_error_tokens: int  # sum of |predicted - reported|: the index's accuracy


class Fleet:
    def __init__(
        self,
        routes: Sequence[ModelRoute] = (),
        *,
        prices: Prices | None = None,
        specs: Mapping[str, ReplicaSpec] | None = None,
        clock: Callable[[], float],
        rng: random.Random,
        block_tokens: int = 16,
        cooldown_s: float = 30.0,
        api_cooldown_s: float = 5.0,
        failures_to_drain: int = 2,
        util_window_s: float = 60.0,
        probe_timeout_s: float = 30.0,
        session_max_idle_s: float = 3600.0,
    ) -> None:
        self.prices = prices or Prices()
        self._specs = dict(specs or {})
        self._clock, self._rng = clock, rng
        self.block_tokens = block_tokens
        self._cooldown_s, self._api_cooldown_s = cooldown_s, api_cooldown_s
        self._failures_to_drain, self._util_window_s = failures_to_drain, util_window_s
        self._probe_timeout_s, self._session_max_idle_s = probe_timeout_s, session_max_idle_s
        self.index = PrefixIndex()
        self._replicas: dict[str, _Replica] = {}
        self._apis: dict[str, _Api] = {}
        self._sessions: dict[str, SessionEntry] = {}
        # session -> (prompt tokens, max tokens) of its last plan, for on_dispatch
        self._planned: dict[str, tuple[int, int]] = {}
        self._inflight: dict[int, tuple[Attempt, _Inflight]] = {}
        self._seq = 0
        self._accuracy = [0, 0, 0]
        for route in routes:
            self._register(route)

    # --- registration and snapshots ---------------------------------------------------------

    def _register(self, route: ModelRoute) -> None:
        for c in route.candidates:
            if c.venue == "selfhost":
                key = replica_key(c.backend_name, c.replica)
                if key not in self._replicas:
                    spec = self._specs.get(c.backend_name, ReplicaSpec())
                    self._replicas[key] = _Replica(c, route.name, spec)
                    self.index.add_replica(key, spec.kv_capacity_blocks)
            elif c.backend_name not in self._apis:
                self._apis[c.backend_name] = _Api(c, route.name)

    def _state(self, key: str, r: _Replica, now: float) -> ReplicaState:
        while r.done and now - r.done[0][0] > self._util_window_s:
            r.done_tokens -= r.done.popleft()[1]
        work = r.done_tokens
        util = work / (self._util_window_s * r.spec.capacity_tok_s)
        c = r.candidate
        return ReplicaState(
            c.backend_name,
            c.replica,
            r.model,
            r.healthy,
            r.drained_until,
            r.inflight_requests,
            r.inflight_tokens,
            r.inflight_blocks,
            0,
            r.spec.prefill_tok_s,
            r.spec.capacity_tok_s,
            self.index.capacity(key),
            min(util, 1.0),
            r.spec.base_ttft_s,
        )

    def snapshot(self, now: float) -> FleetSnapshot:
        reps = tuple(self._state(k, r, now) for k, r in self._replicas.items())
        apis = tuple(ApiState(n, a.model, True, a.cooldown_until) for n, a in self._apis.items())
        return FleetSnapshot(reps, apis, self.index, self._seq)

    def sessions(self) -> SessionTable:
        return SessionTable(MappingProxyType(self._sessions))

    # --- RoutingPort --------------------------------------------------------------------------

    def route(
        self,
        features: RequestFeatures,
        policy: RoutingPolicy,
        allowed: Collection[str] | None = None,
    ) -> Decision:
        """One pure decision over the current state (no side effects but the sequence number)."""
        now = self._clock()
        snap = self.snapshot(now)
        if allowed is not None:  # the route's own candidates, whatever model they registered as
            m = features.model
            snap = FleetSnapshot(
                tuple(replace(r, model=m) for r in snap.replicas if r.backend in allowed),
                tuple(replace(a, model=m) for a in snap.apis if a.backend in allowed),
                snap.prefixes,
                snap.seq,
            )
        self._seq += 1
        self._planned[features.session_id] = (features.prompt_tokens, features.max_tokens)
        return choose(features, snap, self.sessions(), self.prices, policy, now, self._rng)

    def plan(
        self,
        route: ModelRoute,
        tenant: TenantPolicy,
        session_id: str,
        prepared: PreparedPrompt,
        prompt_tokens: int,
        max_tokens: int,
    ) -> RoutePlan:
        self._register(route)
        features = RequestFeatures(
            tenant.tenant,
            session_id,
            route.name,
            prepared.prefix_hashes,
            prompt_tokens,
            max_tokens,
            self.block_tokens,
        )
        names = {c.backend_name for c in route.candidates}
        allowed = names if tenant.backends is None else names & set(tenant.backends)
        decision = self.route(features, tenant.routing, allowed)
        first = Attempt(self._candidate(_first(decision)), decision.reason)
        rest = tuple(Attempt(self._candidate(s), "fallback") for s in decision.fallbacks)
        attempts = (first,) + rest
        return RoutePlan(attempts, _details(decision))

    def _candidate(self, score: CandidateScore) -> Candidate:
        if score.venue == "selfhost" and score.replica is not None:
            return self._replicas[score.replica].candidate
        return self._apis[score.backend].candidate

    def on_dispatch(self, attempt: Attempt, session_id: str, prepared: PreparedPrompt) -> None:
        """Count the load before the call goes out, and record the prompt in the index."""
        c = attempt.candidate
        hashes = prepared.prefix_hashes
        prompt, max_tokens = self._planned.get(session_id, (len(hashes) * self.block_tokens, 0))
        if c.venue != "selfhost":
            self._inflight[id(attempt)] = (attempt, _Inflight(None, session_id, prompt, 0, 0))
            return
        key = replica_key(c.backend_name, c.replica)
        r = self._replicas[key]
        matched = self.index.matched_blocks(key, hashes)
        cached = min(matched * self.block_tokens, max(prompt - 1, 0))
        blocks = -(-(prompt + max_tokens) // self.block_tokens)
        record = _Inflight(key, session_id, prompt, prompt - cached, matched, blocks=blocks)
        r.inflight_requests += 1
        r.inflight_tokens += record.uncached_tokens
        r.inflight_blocks += blocks
        self.index.insert(key, hashes)
        self._inflight[id(attempt)] = (attempt, record)

    def on_first_token(self, attempt: Attempt) -> None:
        """Optional: the prefill is done, so its tokens stop counting as queued work."""
        held = self._inflight.get(id(attempt))
        if held is not None and held[1].key is not None:
            self._release_prefill(held[1])

    def _release_prefill(self, rec: _Inflight) -> None:
        if rec.key is not None and not rec.prefill_released:
            self._replicas[rec.key].inflight_tokens -= rec.uncached_tokens
            rec.prefill_released = True

    def on_complete(self, attempt: Attempt, usage: Usage, ok: bool) -> None:
        """Release the load (completion, error or disconnect); idempotent per attempt."""
        held = self._inflight.pop(id(attempt), None)
        if held is None:
            return
        now, rec, c = self._clock(), held[1], attempt.candidate
        if rec.key is None:
            self._api_done(c, rec, usage, ok, now)
            return
        r = self._replicas[rec.key]
        self._release_prefill(rec)
        r.inflight_requests -= 1
        r.inflight_blocks -= rec.blocks
        if not ok:
            r.failures += 1
            if r.failures >= self._failures_to_drain:
                self._drain(rec.key, now)
            return
        r.failures = 0
        work_tokens = usage.input_tokens + usage.cache_write_tokens + usage.output_tokens
        r.done.append((now, work_tokens))
        r.done_tokens += work_tokens
        self._correct(rec, usage)
        self._sessions[rec.session_id] = session_after(
            rec.session_id,
            "selfhost",
            c.backend_name,
            rec.key,
            now,
            rec.prompt_tokens,
            usage.output_tokens,
        )

    def _api_done(self, c: Candidate, rec: _Inflight, usage: Usage, ok: bool, now: float) -> None:
        if not ok:
            self._apis[c.backend_name].cooldown_until = now + self._api_cooldown_s
            return
        self._sessions[rec.session_id] = session_after(
            rec.session_id,
            "api",
            c.backend_name,
            None,
            now,
            usage.prompt_tokens,
            usage.output_tokens,
        )

    def _correct(self, rec: _Inflight, usage: Usage) -> None:
        assert rec.key is not None
        reported = usage.cache_read_tokens
        predicted = min(rec.predicted_blocks * self.block_tokens, max(rec.prompt_tokens - 1, 0))
        self._accuracy[0] += predicted
        self._accuracy[1] += reported
        self._accuracy[2] += abs(predicted - reported)
        self.index.correct(rec.key, rec.predicted_blocks, reported // self.block_tokens)

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        """Record the answer: `chain_hashes` is the prompt's chain extended over the answer."""
        c = attempt.candidate
        if c.venue == "selfhost":
            self.index.insert(replica_key(c.backend_name, c.replica), chain_hashes)

    # --- health ------------------------------------------------------------------------------

    def _drain(self, key: str, now: float) -> None:
        r = self._replicas[key]
        r.healthy = False
        r.drained_until = now + self._cooldown_s
        self.index.clear(key)

    async def check_health(self) -> dict[str, bool]:
        """Probe every replica not cooling down with a real one-token generation."""
        now = self._clock()
        due = [(k, r) for k, r in self._replicas.items() if now >= r.drained_until]
        results = await asyncio.gather(*(self._probe(r) for _, r in due))
        for (key, r), ok in zip(due, results, strict=True):
            if ok:
                r.healthy, r.failures = True, 0
            else:
                self._drain(key, self._clock())
        return {k: ok for (k, _), ok in zip(due, results, strict=True)}

    async def _probe(self, r: _Replica) -> bool:
        request = ChatRequest(
            model=r.model,
            messages=(Message("user", (TextPart("ping"),)),),
            max_tokens=1,
            temperature=0.0,
        )
        call = BackendCall(request, "openai", timeout_s=self._probe_timeout_s)
        try:
            response = await asyncio.wait_for(
                r.candidate.backend.complete(call), self._probe_timeout_s
            )
        except Exception:  # any failure of the probe means not serving
            return False
        return response.usage.output_tokens >= 1 or bool(response.content)

    async def run_health_checks(self, interval_s: float = 10.0) -> None:
        """Run forever (start as a task in the lifespan; cancel on shutdown)."""
        while True:
            await self.check_health()
            self._sweep_sessions()
            await asyncio.sleep(interval_s)

    def _sweep_sessions(self) -> None:
        now = self._clock()
        stale = [
            s for s, e in self._sessions.items() if now - e.last_seen > self._session_max_idle_s
        ]
        for s in stale:
            del self._sessions[s]
        # plans of sessions that never completed; a dispatch racing this falls back to hashes
        self._planned = {s: v for s, v in self._planned.items() if s in self._sessions}

    def stats(self) -> FleetStats:
        snap = self.snapshot(self._clock())
        p, rep, err = self._accuracy
        return FleetStats(snap.replicas, len(self._sessions), p, rep, err)


def _first(d: Decision) -> CandidateScore:
    return next(s for s in d.scores if s.backend == d.backend and s.replica == d.replica)


def _details(d: Decision) -> dict[str, object]:
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
                "usd": round(s.predicted_usd, 6),
                "note": s.note,
            }
            for s in d.scores
        ],
    }
