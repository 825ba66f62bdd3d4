"""A replica alone in its routes keeps no prefix index: nothing to choose, so nothing is
matched, pinned or inserted, while load, health, drain and sessions are kept as for any replica
(`FullDecisionFleet`, the reference, runs the full decision for it)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from adapters.types import Usage
from bench.gateway_overhead import write_lantern_config
from gateway.app import create_app
from gateway.core.pipeline import Pipeline, PipelineParts
from gateway.fleet.routing_port import Fleet, ReplicaSpec
from gateway.fleet.state import ONLY_CANDIDATE
from gateway.ports import Attempt, Candidate, ModelRoute, RoutePlan
from gateway.settings import load_settings
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from routing.types import NoRouteAvailable
from tests.gateway.core.test_after_reply import Backend, incoming
from tests.gateway.core.test_answer_extend import ExtendFakes
from tests.gateway.fleet_reference import FullDecisionFleet
from tests.routing.test_router_fleet import Clock, ProbeBackend, chain, prepared

KEY = "local@http://a"
SPEC = ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=100)


def _fleet(
    *routes: ModelRoute, index_lone: bool = False, clock: Clock | None = None
) -> tuple[Fleet, Clock]:
    clock = clock or Clock()
    specs = {"local": SPEC}
    kind = FullDecisionFleet if index_lone else Fleet
    fleet = kind(list(routes), clock=clock, rng=random.Random(1), specs=specs)
    return fleet, clock


def _tenant(**kw: object) -> TenantPolicy:
    return TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"), **kw)  # type: ignore[arg-type]


def _route(*urls: str, name: str = "smollm2") -> ModelRoute:
    return ModelRoute(
        name,
        tuple(
            Candidate(ProbeBackend(u), "local" if u == "a" else "edge", "selfhost", f"http://{u}")
            for u in urls
        ),  # type: ignore[arg-type]
    )


def test_the_lone_replica_counts_load_but_keeps_no_index() -> None:
    route = _route("a")
    fleet, clock = _fleet(route)
    h = chain("s", 30)
    plan = fleet.plan(route, _tenant(), "s1", prepared(h), 30 * 16, 64)
    (attempt,) = plan.attempts
    assert (attempt.reason, attempt.indexed, attempt.candidate) == (
        ONLY_CANDIDATE,
        False,
        route.candidates[0],
    )
    assert plan.details == {
        "venue": "selfhost",
        "backend": "local",
        "replica": KEY,
        "reason": ONLY_CANDIDATE,
    }
    fleet.on_dispatch(attempt, "s1", prepared(h))
    (state,) = fleet.stats().replicas
    # the whole prompt is prefill still to do (no cached share is known); 30*16 + 64 tokens
    assert (state.inflight_requests, state.inflight_tokens, state.inflight_blocks) == (1, 480, 34)
    assert fleet.index.size(KEY) == 0 and fleet.index.pinned(KEY) == 0
    clock.now += 0.2
    fleet.on_complete(attempt, Usage(480, 8, cache_read_tokens=464), ok=True)
    fleet.extend(attempt, h + chain("answer", 1))
    (state,) = fleet.stats().replicas
    assert (state.inflight_requests, state.inflight_tokens, state.inflight_blocks) == (0, 0, 0)
    assert fleet.index.size(KEY) == 0 and fleet.index.pinned(KEY) == 0
    stats = fleet.stats()
    assert stats.sessions == 1
    assert (stats.predicted_cached_tokens, stats.reported_cached_tokens) == (0, 0)
    assert state.prefill_tok_s == 1000.0  # no prefill sample without a cached share
    assert fleet.sessions().fresh("s1", clock.now, 60.0) is not None


def test_the_same_fleet_with_the_index_kept_pins_and_learns() -> None:
    """The reference (`FullDecisionFleet`) runs the full decision."""
    route = _route("a")
    fleet, clock = _fleet(route, index_lone=True)
    h = chain("s", 30)
    plan = fleet.plan(route, _tenant(), "s1", prepared(h), 30 * 16, 64)
    assert plan.attempts[0].indexed and plan.attempts[0].reason != ONLY_CANDIDATE
    fleet.on_dispatch(plan.attempts[0], "s1", prepared(h))
    assert fleet.index.pinned(KEY) == 30 + 4
    clock.now += 0.2
    fleet.on_complete(plan.attempts[0], Usage(480, 8), ok=True)
    assert fleet.index.matched_blocks(KEY, h) == 30
    assert fleet.stats().replicas[0].prefill_tok_s != 1000.0


def test_a_drained_lone_replica_still_serves_and_its_first_good_answer_restores_it() -> None:
    """Panic routing: draining the only replica would refuse every tenant for the cool-down
    (a transient fault of the replica made a 30 s outage); it is drained, still planned, and
    back in service on its first good answer, not after a fixed cool-down."""
    route = _route("a")
    fleet, clock = _fleet(route)
    for i in range(2):
        plan = fleet.plan(route, _tenant(), f"s{i}", prepared(chain("x", 4)), 64, 16)
        fleet.on_dispatch(plan.attempts[0], f"s{i}", prepared(chain("x", 4)))
        fleet.on_complete(plan.attempts[0], Usage(), ok=False)
    (state,) = fleet.stats().replicas
    assert not state.healthy and state.inflight_requests == 0
    assert state.drained_until == clock.now + 30.0
    plan = fleet.plan(route, _tenant(), "s3", prepared(chain("x", 4)), 64, 16)
    assert plan.attempts[0].reason == ONLY_CANDIDATE
    clock.now += 0.5
    fleet.on_dispatch(plan.attempts[0], "s3", prepared(chain("x", 4)))
    fleet.on_complete(plan.attempts[0], Usage(64, 1), ok=True)
    (state,) = fleet.stats().replicas
    assert state.healthy and state.drained_until == 0.0


def test_a_good_probe_restores_a_drained_replica_within_its_cool_down() -> None:
    route = _route("a")
    fleet, clock = _fleet(route)
    fleet.health.drain(KEY, clock.now, "test")
    clock.now += 1  # well within the 30 s cool-down
    assert asyncio.run(fleet.check_health()) == {KEY: True}
    (state,) = fleet.stats().replicas
    assert state.healthy and state.drained_until == 0.0


def test_the_lone_plan_respects_the_tenant() -> None:
    route = _route("a")
    fleet, _ = _fleet(route)
    with pytest.raises(NoRouteAvailable):  # the tenant may use no self-hosted venue
        fleet.plan(
            route,
            TenantPolicy(tenant="t", routing=RoutingPolicy(venue="api_only")),  # type: ignore[arg-type]
            "s",
            prepared(()),
            1,
            1,
        )
    with pytest.raises(NoRouteAvailable):  # nor this backend
        fleet.plan(route, _tenant(backends=["other"]), "s", prepared(()), 1, 1)


def test_pools_of_two_decide_and_index_exactly_as_before() -> None:
    """Two replicas (also for a tenant that may use only one of them, and for the replica that
    another route names alone): the same plans and index with either setting."""
    two, clocks = _route("a", "b"), [Clock(), Clock()]
    shared = _route("a", name="other")  # `a` is also alone in another route
    fleets = [
        _fleet(two, shared, index_lone=flag, clock=c)[0]
        for flag, c in zip((False, True), clocks, strict=True)
    ]
    tenants = [_tenant(), _tenant(backends=["local"]), _tenant()]
    seen: list[list[object]] = [[], []]
    for k, fleet in enumerate(fleets):
        for i in range(12):
            h = chain(f"s{i % 4}", 10 + i)
            route = shared if i % 5 == 4 else two
            plan = fleet.plan(route, tenants[i % 3], f"s{i % 4}", prepared(h), len(h) * 16, 32)
            fleet.on_dispatch(plan.attempts[0], f"s{i % 4}", prepared(h))
            clocks[k].now += 0.1
            fleet.on_complete(plan.attempts[0], Usage(len(h) * 16, 8), ok=True)
            fleet.extend(plan.attempts[0], h + chain(f"a{i}", 1))
            seen[k].append((plan.details, [a.indexed for a in plan.attempts]))
            seen[k].append((fleet.index.size(KEY), fleet.index.size("edge@http://b")))
    assert seen[0] == seen[1]
    assert all(indexed == [True] * len(indexed) for d, indexed in seen[0][::2])  # type: ignore[misc]


class LoneFakes(ExtendFakes):
    def plan(self, route, tenant, session_id, prepared, prompt_tokens, max_tokens) -> RoutePlan:  # type: ignore[no-untyped-def]
        return RoutePlan((Attempt(route.candidates[0], ONLY_CANDIDATE, indexed=False),))


def test_the_pipeline_works_out_no_answer_chain_for_an_unindexed_attempt() -> None:
    async def main() -> LoneFakes:
        fakes = LoneFakes(Backend(), "selfhost")
        metrics = Telemetry(TracerProvider(), Metrics())
        pipeline = Pipeline(PipelineParts(fakes, fakes, fakes, fakes, fakes, fakes, fakes, metrics))  # type: ignore[arg-type]
        await pipeline.complete(await pipeline.admit(incoming()))
        async for _ in pipeline.stream(await pipeline.admit(incoming(stream=True))):
            pass
        await asyncio.sleep(0)
        return fakes

    fakes = asyncio.run(main())
    assert fakes.answers == [] and fakes.extended == []
    assert fakes.completed == [True, True]  # the load is still released


def test_lantern_serve_keeps_no_index_for_a_lone_replica(tmp_path: Path) -> None:
    """The served app's fleet (gateway/wiring/): one openai_compatible backend, as in the
    gateway benchmark's config, is planned without the index."""
    app = create_app(load_settings(write_lantern_config(tmp_path, "http://127.0.0.1:9/v1")))
    parts = app.state.components
    route = parts.models.get("gpt-4o-mini")
    plan = parts.pipeline.s.routing.plan(route, _tenant(), "s", prepared(chain("x", 3)), 48, 8)
    assert [(a.reason, a.indexed) for a in plan.attempts] == [(ONLY_CANDIDATE, False)]
