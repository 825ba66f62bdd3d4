"""The stateful fleet behind the pure router: load counters, the session table, the per-replica
prefix index, engine-reported load (scraped off the request path), health checks by real
one-token generations, drain and cooldown.

Implements the pipeline's `RoutingPort`; every decision is delegated to `adapters.router.choose`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from adapters.router import choose, session_after
from adapters.routing_index import PrefixIndex
from adapters.routing_types import (
    ApiState,
    CandidateScore,
    Decision,
    FleetSnapshot,
    NoRouteAvailable,
    Prices,
    ReplicaState,
    RequestFeatures,
    SessionEntry,
    SessionTable,
    replica_key,
)
from adapters.types import Usage
from gateway.fleet_probe import probe, scrape_due
from gateway.fleet_signals import (
    EngineLoad,
    LoadSignals,
    MetricsSource,
    metrics_url,
)
from gateway.fleet_state import (
    NONSTREAM_SAMPLE_MAX_OUTPUT,
    ApiRecord,
    FleetStats,
    InflightCall,
    ReplicaRecord,
    ReplicaSpec,
    first_score,
    only_candidate_plan,
    pending_prefills,
    plan_details,
    slowest_learned,
)
from gateway.fleet_window import ContextWindows
from gateway.ports import Attempt, Candidate, Fault, ModelRoute, PreparedPrompt, RoutePlan
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy

log = logging.getLogger("lantern.fleet")

__all__ = ["Fleet", "FleetStats", "ReplicaSpec"]


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
        metrics: MetricsSource | None = None,
        signal_interval_s: float = 1.0,
        signal_max_age_s: float = 5.0,
        signal_timeout_s: float = 0.5,
        live_window_s: float = 10.0,
        index_lone_replicas: bool = True,
        windows: ContextWindows | None = None,
    ) -> None:
        self.prices = prices or Prices()
        self._specs = dict(specs or {})
        self._clock, self._rng = clock, rng
        self.block_tokens = block_tokens
        self._cooldown_s, self._api_cooldown_s = cooldown_s, api_cooldown_s
        self._failures_to_drain, self._util_window_s = failures_to_drain, util_window_s
        self._probe_timeout_s, self._session_max_idle_s = probe_timeout_s, session_max_idle_s
        self.index = PrefixIndex()
        self._replicas: dict[str, ReplicaRecord] = {}
        self._apis: dict[str, ApiRecord] = {}
        self._sessions: dict[str, SessionEntry] = {}
        # session -> (prompt tokens, max tokens) of its last plan, for on_dispatch
        self._planned: dict[str, tuple[int, int]] = {}
        self._inflight: dict[int, tuple[Attempt, InflightCall]] = {}
        self._seq, self._accuracy = 0, [0, 0, 0]
        self._learned: dict[str, float] = {}  # backend -> its replicas' slowest learned rate
        self._metrics, self._signal_timeout_s = metrics, signal_timeout_s
        # a block touched this recently belongs to a live session (its next call is coming)
        self._live_window_s = live_window_s
        self.signals = LoadSignals(interval_s=signal_interval_s, max_age_s=signal_max_age_s)
        # False: a replica alone in every route naming it keeps no prefix index (`_lone`)
        self._index_lone = index_lone_replicas
        self._pool: dict[str, int] = {}  # replica key -> the most candidates of a route naming it
        self.windows = windows or ContextWindows()
        for route in routes:
            self._register(route)

    # --- registration and snapshots ---------------------------------------------------------

    def _register(self, route: ModelRoute) -> None:
        for c in route.candidates:
            if c.venue == "selfhost":
                key = replica_key(c.backend_name, c.replica)
                if self._pool.get(key, 0) < len(route.candidates):
                    self._pool[key] = len(route.candidates)
                if key not in self._replicas:
                    spec = self._specs.get(c.backend_name, ReplicaSpec())
                    self._replicas[key] = ReplicaRecord(c, route.name, spec)
                    self.index.add_replica(key, spec.kv_capacity_blocks)
            elif c.backend_name not in self._apis:
                self._apis[c.backend_name] = ApiRecord(c, route.name)

    def _state(
        self, key: str, r: ReplicaRecord, now: float, pending: Sequence[tuple[int, float]]
    ) -> ReplicaState:
        while r.done and now - r.done[0][0] > self._util_window_s:
            r.done_tokens -= r.done.popleft()[1]
        util = r.done_tokens / (self._util_window_s * r.spec.capacity_tok_s)
        load = self.signals.view(key, now, r.counts(), self.index.nominal(key))
        # a KV-bound engine admits about one request per completion: service time / running
        running = r.inflight_requests - (load.queue_depth if load else 0)
        service = r.service_s if r.service_s is not None else 10 * r.spec.base_ttft_s
        admit_interval = service / max(running, 1)
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
            load.queue_depth if load else 0,
            r.prefill.capped(pending, self._learned.get(c.backend_name)),
            r.spec.capacity_tok_s,
            self.index.capacity(key),
            min(util, 1.0),
            r.spec.base_ttft_s,
            load.kv_free_blocks if load else None,
            admit_interval,
            load.age_s if load else None,
            self.index.recent_blocks(key, now, self._live_window_s),
        )

    def snapshot(self, now: float) -> FleetSnapshot:
        pending = pending_prefills(self._inflight.values(), self._replicas, now)
        reps = tuple(self._state(k, r, now, pending.get(k, ())) for k, r in self._replicas.items())
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
        lone = self._lone(route, tenant)
        if lone is not None:
            self._seq += 1
            self._planned[session_id] = (prompt_tokens, max_tokens)
            return only_candidate_plan(lone.candidate)
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
        first = Attempt(self._candidate(first_score(decision)), decision.reason)
        rest = tuple(Attempt(self._candidate(s), "fallback") for s in decision.fallbacks)
        attempts = self.windows.fitting((first, *rest), prompt_tokens + max_tokens)
        if not attempts:  # the pipeline checked that one of the route's replicas can fit it
            raise NoRouteAvailable(route.name, tenant.routing.venue)
        return RoutePlan(attempts, plan_details(decision))

    def context_window(self, route: ModelRoute, tenant: TenantPolicy) -> int | None:
        return self.windows.route_window(route, tenant.backends)

    def _lone(self, route: ModelRoute, tenant: TenantPolicy) -> ReplicaRecord | None:
        """The route's one replica when there is nothing to decide: it is the only candidate of
        every route naming it, the tenant may use it and it is serving; else None (the full
        decision, which also says why no candidate may serve). Unless the fleet was made with
        `index_lone_replicas` (`lantern serve` is not), such a replica keeps no prefix index:
        with nothing to choose, the passes over every block hash of the prompt (match, pin,
        unpin, the answer's insert) buy nothing. Its load, health and sessions are kept as for
        any replica; one that a later route gives a second candidate starts with a cold index."""
        if self._index_lone or len(route.candidates) != 1:
            return None
        c = route.candidates[0]
        if c.venue != "selfhost" or tenant.routing.venue == "api_only":
            return None
        if tenant.backends is not None and c.backend_name not in tenant.backends:
            return None
        key = replica_key(c.backend_name, c.replica)
        r = self._replicas[key]
        if self._pool[key] != 1 or not r.healthy or self._clock() < r.drained_until:
            return None
        return r

    def _candidate(self, score: CandidateScore) -> Candidate:
        if score.venue == "selfhost" and score.replica is not None:
            return self._replicas[score.replica].candidate
        return self._apis[score.backend].candidate

    def on_dispatch(self, attempt: Attempt, session_id: str, prepared: PreparedPrompt) -> None:
        """Count the load before the call goes out, and pin the prompt in the index."""
        c = attempt.candidate
        hashes = prepared.prefix_hashes
        prompt, max_tokens = self._planned.get(session_id, (len(hashes) * self.block_tokens, 0))
        if c.venue != "selfhost":
            self._inflight[id(attempt)] = (attempt, InflightCall(None, session_id, prompt, 0, 0))
            return
        key = replica_key(c.backend_name, c.replica)
        r = self._replicas[key]
        # the lone replica (`_lone`) keeps no index: its load is counted, nothing is matched
        # or pinned, and its whole prompt counts as prefill still to do
        indexed = attempt.indexed
        matched = self.index.matched_blocks(key, hashes) if indexed else 0
        cached = min(matched * self.block_tokens, max(prompt - 1, 0))
        blocks = -(-(prompt + max_tokens) // self.block_tokens)
        now = self._clock()
        record = InflightCall(
            key,
            session_id,
            prompt,
            prompt - cached,
            matched,
            blocks=blocks,
            started_at=now,
            dispatched_at=now,
            queued_tokens=r.inflight_tokens + prompt - cached,
            max_tokens=max_tokens,
            hashes=hashes if indexed else (),
            reserved_blocks=max(blocks - len(hashes), 0) if indexed else 0,
            indexed=indexed,
        )
        r.inflight_requests += 1
        r.dispatched += 1
        r.inflight_tokens += record.uncached_tokens
        r.inflight_blocks += blocks
        if indexed:
            # held outside the index's LRU until completion, with the answer's blocks reserved
            self.index.pin(key, hashes, now, record.reserved_blocks)
        self._inflight[id(attempt)] = (attempt, record)

    def on_first_token(self, attempt: Attempt) -> None:
        """Optional: the prefill is done, so its tokens stop counting as queued work."""
        held = self._inflight.get(id(attempt))
        if held is not None and held[1].key is not None and not held[1].prefill_released:
            rec, now = held[1], self._clock()
            self._learn_prefill(rec, now - rec.dispatched_at)
            self._release_prefill(rec)
            rec.started_at = now

    def _learn_prefill(self, rec: InflightCall, seconds: float) -> None:
        """One rate sample: the replica's queued prefill at dispatch (ours included) took
        `seconds` less the fixed cost. Work from other clients of the engine is not counted,
        so a shared engine reads slower than it is (the router then spreads more, not less).
        A call without the index (the lone replica) is no sample: its cached share is unknown."""
        assert rec.key is not None
        if not rec.indexed:
            return
        r = self._replicas[rec.key]
        n, b = r.prefill.num_samples, r.candidate.backend_name
        if not r.prefill.observe(rec.queued_tokens, seconds - r.spec.base_ttft_s):
            return
        self._learned[b] = slowest_learned(self._replicas.values(), b)
        if n < 4 or n % 10 == 9:
            log.info(
                "prefill rate of %s: %.0f tok/s after %d samples (%d calls dispatched)",
                rec.key,
                r.prefill.tok_s,
                n + 1,
                r.dispatched,
            )

    def _release_prefill(self, rec: InflightCall) -> None:
        if rec.key is not None and not rec.prefill_released:
            self._replicas[rec.key].inflight_tokens -= rec.uncached_tokens
            rec.prefill_released = True

    def on_complete(
        self, attempt: Attempt, usage: Usage, ok: bool, fault: Fault = "backend"
    ) -> None:
        """Release the load (completion, error or disconnect); idempotent per attempt. Only a
        fault of the backend counts towards draining it or cooling it down."""
        held = self._inflight.pop(id(attempt), None)
        if held is None:
            return
        now, rec, c = self._clock(), held[1], attempt.candidate
        if rec.key is None:
            self._api_done(c, rec, usage, ok, now, fault)
            return
        r = self._replicas[rec.key]
        if ok and not rec.prefill_released and usage.output_tokens <= NONSTREAM_SAMPLE_MAX_OUTPUT:
            # no first token seen: the whole call bounds the prefill; with a short answer the
            # decode is a small part of it (biased slow, i.e. towards spreading the load)
            self._learn_prefill(rec, now - rec.dispatched_at)
        self._release_prefill(rec)
        if rec.indexed:
            self.index.unpin(rec.key, rec.hashes, rec.reserved_blocks)
        r.inflight_requests -= 1
        r.completed += 1
        r.inflight_blocks -= rec.blocks
        if not ok:
            if fault == "backend":
                r.failures += 1
                if r.failures >= self._failures_to_drain:
                    self._drain(rec.key, now)
            return
        r.failures = 0
        took = now - rec.started_at
        r.service_s = took if r.service_s is None else 0.8 * r.service_s + 0.2 * took
        work_tokens = usage.input_tokens + usage.cache_write_tokens + usage.output_tokens
        r.done.append((now, work_tokens))
        r.done_tokens += work_tokens
        if rec.indexed:  # the index's accuracy: only calls it predicted
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

    def _api_done(
        self, c: Candidate, rec: InflightCall, usage: Usage, ok: bool, now: float, fault: Fault
    ) -> None:
        if not ok:
            if fault == "backend":
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

    def _correct(self, rec: InflightCall, usage: Usage) -> None:
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
        if c.venue == "selfhost" and attempt.indexed:
            key = replica_key(c.backend_name, c.replica)
            self.index.insert(key, chain_hashes, self._clock())

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
        await self.windows.learn(r.candidate for _, r in due)
        results = await asyncio.gather(
            *(probe(r.candidate, r.model, self._probe_timeout_s) for _, r in due)
        )
        for (key, r), ok in zip(due, results, strict=True):
            if ok:
                r.healthy, r.failures = True, 0
            else:
                self._drain(key, self._clock())
        return {k: ok for (k, _), ok in zip(due, results, strict=True)}

    async def run_health_checks(self, interval_s: float = 10.0) -> None:
        """Run forever (start as a task in the lifespan; cancel on shutdown)."""
        while True:
            await self.check_health()
            self._sweep_sessions()
            await asyncio.sleep(interval_s)

    # --- engine-reported load ------------------------------------------------------------------

    def observe_load(self, key: str, load: EngineLoad) -> None:
        """One engine sample for one replica; a reported KV size replaces the configured one."""
        r = self._replicas.get(key)
        if r is None:
            return
        if load.kv_capacity_tokens:
            self.index.resize(key, max(load.kv_capacity_tokens // self.block_tokens, 1))
        self.signals.observe(key, load, r.counts())

    async def poll_signals(self) -> dict[str, bool]:
        """Scrape every due replica's metrics once (`scrape_due`); True where a sample arrived."""
        source, now = self._metrics, self._clock()
        if source is None:  # no replica has a metrics URL
            return {}
        due = [
            (key, url)
            for key, r in self._replicas.items()
            if (url := self._metrics_url(r)) is not None
            and now >= r.drained_until
            and self.signals.is_due(key, now)
        ]
        return await scrape_due(
            source, due, self._signal_timeout_s, self.signals, self.observe_load, self._clock
        )

    def _metrics_url(self, r: ReplicaRecord) -> str | None:
        path, base = r.spec.metrics_path, r.candidate.replica
        if self._metrics is None or path is None or base is None:
            return None
        return metrics_url(base, path)

    async def run_signal_polls(self) -> None:
        """Scrape forever at the signal interval (a task in the lifespan; cancel on shutdown)."""
        while True:
            try:
                await self.poll_signals()
            except Exception:  # a bug here must not stop the polls; the router falls back
                log.exception("engine load poll failed")
            await asyncio.sleep(self.signals.interval_s)

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
