"""The fleet behind the pure router: the pipeline's `RoutingPort`. It owns the plan (a snapshot
of every replica's state handed to `routing.decision.choose`, which makes every decision) and wires
its parts: the registry, the load book of calls in flight, health checks and engine-load polls.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from adapters.types import Usage
from gateway.fleet.book import LoadBook
from gateway.fleet.capacity import SlotGate
from gateway.fleet.engine_metrics import EngineLoad
from gateway.fleet.health import ReplicaHealth
from gateway.fleet.polls import SignalPolls
from gateway.fleet.registry import FleetRegistry
from gateway.fleet.sharing import FleetSharing
from gateway.fleet.signals import LoadSignals, MetricsSource
from gateway.fleet.state import (
    FleetStats,
    ReplicaRecord,
    ReplicaSpec,
    first_score,
    only_candidate_plan,
    plan_details,
)
from gateway.fleet.window import ContextWindows
from gateway.ports import Attempt, Fault, ModelRoute, PreparedPrompt, RoutePlan
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from routing.decision import choose, lantern_pick
from routing.prefix_index import PrefixIndex
from routing.types import (
    ApiState,
    Decision,
    FleetSnapshot,
    NoRouteAvailable,
    Prices,
    ReplicaPicker,
    ReplicaState,
    RequestFeatures,
    SessionTable,
    replica_key,
)

__all__ = ["Fleet", "FleetConfig", "FleetStats", "ReplicaSpec"]


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """How the fleet counts, forgets and decides: block size, drain and cool-down, the windows
    of its load figures, the engine-signal polls and the replica picker."""

    block_tokens: int = 16
    cooldown_s: float = 30.0  # a drained replica waits this long before its probe
    api_cooldown_s: float = 5.0
    failures_to_drain: int = 2
    util_window_s: float = 60.0
    probe_timeout_s: float = 30.0
    # a replica with no free health endpoint gets a one-token probe at most this often
    paid_probe_interval_s: float = 0.0
    session_max_idle_s: float = 3600.0
    signal_interval_s: float = 1.0
    signal_max_age_s: float = 5.0
    signal_timeout_s: float = 0.5
    # a block touched this recently belongs to a live session (its next call is coming)
    live_window_s: float = 10.0
    picker: ReplicaPicker = lantern_pick  # Lantern's own; benchmarks inject baselines


class Fleet:
    def __init__(
        self,
        routes: Sequence[ModelRoute] = (),
        config: FleetConfig | None = None,
        *,
        clock: Callable[[], float],
        rng: random.Random,
        prices: Prices | None = None,
        specs: Mapping[str, ReplicaSpec] | None = None,
        metrics: MetricsSource | None = None,
        windows: ContextWindows | None = None,
    ) -> None:
        cfg = self.config = config or FleetConfig()
        self.prices = prices or Prices()
        self._clock, self._rng = clock, rng
        self.block_tokens = block_tokens = cfg.block_tokens
        self._util_window_s, self._seq = cfg.util_window_s, 0
        self._live_window_s = cfg.live_window_s
        self.picker = cfg.picker
        self.registry = FleetRegistry(specs or {})
        self.signals = LoadSignals(interval_s=cfg.signal_interval_s, max_age_s=cfg.signal_max_age_s)
        self.windows = windows or ContextWindows()
        self.health = ReplicaHealth(
            self.registry,
            self.windows,
            clock=clock,
            cooldown_s=cfg.cooldown_s,
            probe_timeout_s=cfg.probe_timeout_s,
            paid_probe_interval_s=cfg.paid_probe_interval_s,
            session_max_idle_s=cfg.session_max_idle_s,
        )
        self.book = LoadBook(
            self.registry,
            clock=clock,
            block_tokens=block_tokens,
            failures_to_drain=cfg.failures_to_drain,
            api_cooldown_s=cfg.api_cooldown_s,
            drain=self.health.drain,
        )
        self.polls = SignalPolls(
            self.registry,
            self.signals,
            metrics,
            clock=clock,
            block_tokens=block_tokens,
            timeout_s=cfg.signal_timeout_s,
        )
        self.gate = SlotGate(self.registry, clock)
        for route in routes:
            self.registry.register(route)
        # shared with the other gateway processes (`share`); None: this process's view alone
        self.sharing: FleetSharing | None = None

    def share(self, sharing: FleetSharing) -> None:
        """Decide on the affinity and prefix index every gateway process shares, and count
        replica slots across them."""
        self.sharing = sharing
        self.gate.share(sharing.slots)

    @property
    def index(self) -> PrefixIndex:
        return self.registry.index

    @index.setter
    def index(self, index: PrefixIndex) -> None:  # a benchmark's oracle replaces it
        self.registry.index = index

    # --- snapshots ---------------------------------------------------------------------------

    def _state(
        self, key: str, r: ReplicaRecord, now: float, pending: Sequence[tuple[int, float]]
    ) -> ReplicaState:
        while r.done and now - r.done[0][0] > self._util_window_s:
            r.done_tokens -= r.done.popleft()[1]
        util = r.done_tokens / (self._util_window_s * r.spec.capacity_tok_s)
        load = self.signals.view(key, now, r.counts(), self.registry.index.nominal(key))
        # a KV-bound engine admits about one request per completion: service time / running
        running = r.inflight_requests - (load.queue_depth if load else 0)
        service = r.service_s if r.service_s is not None else 10 * r.spec.base_ttft_s
        admit_interval = service / max(running, 1)
        c = r.candidate
        learned = self.book.learned.get(c.backend_name)
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
            r.prefill.capped(pending, learned),
            r.spec.capacity_tok_s,
            self.registry.index.capacity(key),
            min(util, 1.0),
            r.spec.base_ttft_s,
            load.kv_free_blocks if load else None,
            admit_interval,
            load.age_s if load else None,
            self.registry.index.recent_blocks(key, now, self._live_window_s),
            r.prefill.capped((), learned),
            self.gate.free_slots(key),
        )

    def snapshot(self, now: float) -> FleetSnapshot:
        pending = self.book.pending(now)
        reg = self.registry
        reps = tuple(self._state(k, r, now, pending.get(k, ())) for k, r in reg.replicas.items())
        apis = tuple(ApiState(n, a.model, True, a.cooldown_until) for n, a in reg.apis.items())
        return FleetSnapshot(reps, apis, reg.index, self._seq)

    def sessions(self) -> SessionTable:
        return SessionTable(MappingProxyType(self.registry.sessions))

    def stats(self) -> FleetStats:
        snap = self.snapshot(self._clock())
        p, rep, err = self.book.accuracy
        return FleetStats(snap.replicas, len(self.registry.sessions), p, rep, err)

    # --- RoutingPort: the plan ----------------------------------------------------------------

    def recall(self, tenant: str, session_id: str) -> Awaitable[None] | None:
        """Before the plan: the session's shared affinity replaces this process's entry (None:
        this process shares none)."""
        return None if self.sharing is None else self.sharing.recall(tenant, session_id)

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
        self.registry.planned[features.session_id] = (features.prompt_tokens, features.max_tokens)
        sessions = self.sessions()
        return choose(features, snap, sessions, self.prices, policy, now, self._rng, self.picker)

    def plan(
        self,
        route: ModelRoute,
        tenant: TenantPolicy,
        session_id: str,
        prepared: PreparedPrompt,
        prompt_tokens: int,
        max_tokens: int,
    ) -> RoutePlan:
        self.registry.register(route)
        lone = self._lone(route, tenant)
        if lone is not None:
            self._seq += 1
            self.registry.planned[session_id] = (prompt_tokens, max_tokens)
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
        first = Attempt(self.registry.candidate(first_score(decision)), decision.reason)
        rest = tuple(Attempt(self.registry.candidate(s), "fallback") for s in decision.fallbacks)
        attempts = self.windows.fitting((first, *rest), prompt_tokens + max_tokens)
        if not attempts:  # the pipeline checked that one of the route's replicas can fit it
            raise NoRouteAvailable(route.name, tenant.routing.venue)
        return RoutePlan(attempts, plan_details(decision))

    def context_window(self, route: ModelRoute, tenant: TenantPolicy) -> int | None:
        return self.windows.route_window(route, tenant.backends)

    def _lone(self, route: ModelRoute, tenant: TenantPolicy) -> ReplicaRecord | None:
        """The route's one replica when there is nothing to decide: it is the only candidate of
        every route naming it and the tenant may use it; else None (the full decision, which also
        says why no candidate may serve). A drained one still serves (panic routing: with nothing
        to fall back to, refusing every call until it cools down is the outage; its first good
        answer brings it back). Such a replica keeps no prefix index: with nothing to choose,
        the passes over every block hash of the prompt (match, pin, unpin, the answer's insert)
        buy nothing. Its load, health and sessions are kept as for
        any replica; one that a later route gives a second candidate starts with a cold index.
        Its calls are not hashed at all (`gateway.fleet.registry.indexed_models`, from the same
        pool over every configured route)."""
        if len(route.candidates) != 1:
            return None
        c = route.candidates[0]
        if c.venue != "selfhost" or tenant.routing.venue == "api_only":
            return None
        if tenant.backends is not None and c.backend_name not in tenant.backends:
            return None
        key = replica_key(c.backend_name, c.replica)
        r = self.registry.replicas[key]
        return r if self.registry.pool[key] == 1 else None

    def queue(self, plan: RoutePlan, tenant: TenantPolicy) -> Awaitable[RoutePlan] | None:
        """Wait for a slot on the plan's replica when it is at capacity (`SlotGate`); None
        when the call may go now."""
        return self.gate.enter(plan, tenant)

    def release(self, plan: RoutePlan) -> None:
        """The call was given up before dispatch: its slot (if any) goes to the next waiter."""
        self.gate.leave(plan.attempts[0])

    # --- RoutingPort: the load book -----------------------------------------------------------

    def on_dispatch(self, attempt: Attempt, session_id: str, prepared: PreparedPrompt) -> None:
        self.book.on_dispatch(attempt, session_id, prepared)
        if self.sharing is not None:
            prompt = self.registry.planned.get(session_id, (0, 0))[0]
            self.sharing.on_dispatch(attempt, session_id, prepared, prompt)

    def on_first_token(self, attempt: Attempt) -> None:
        self.book.on_first_token(attempt)

    def on_complete(
        self, attempt: Attempt, usage: Usage, ok: bool, fault: Fault = "backend"
    ) -> None:
        self.book.on_complete(attempt, usage, ok, fault)
        self.gate.leave(attempt)

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        self.book.extend(attempt, chain_hashes)
        if self.sharing is not None:
            self.sharing.on_extend(attempt, chain_hashes)

    # --- off the request path -----------------------------------------------------------------

    async def check_health(self) -> dict[str, bool]:
        return await self.health.check()

    async def run_health_checks(self, interval_s: float = 10.0) -> None:
        """Run forever (start as a task in the lifespan; cancel on shutdown)."""
        await self.health.run(interval_s)

    def observe_load(self, key: str, load: EngineLoad) -> None:
        self.polls.observe(key, load)

    async def poll_signals(self) -> dict[str, bool]:
        return await self.polls.poll()

    async def run_signal_polls(self) -> None:
        """Scrape forever at the signal interval (a task in the lifespan; cancel on shutdown)."""
        await self.polls.run()
