"""Through the real Fleet: a call in flight pins its prompt in the replica's index (and
reserves its answer's blocks) until it completes, fails or is dropped, as the engine does."""

from __future__ import annotations

import random

from adapters.types import Usage
from gateway.fleet.routing_port import Fleet, ReplicaSpec
from gateway.ports import Candidate, ModelRoute
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.gateway.fleet_reference import FullDecisionFleet
from tests.routing.test_router_fleet import Clock, chain, prepared

KEY = "local@http://a"


def _fleet() -> tuple[Fleet, ModelRoute, Clock, TenantPolicy]:
    route = ModelRoute("smollm2", (Candidate(None, "local", "selfhost", "http://a"),))  # type: ignore[arg-type]
    clock = Clock()
    fleet = FullDecisionFleet(  # one replica, indexed as in a pool
        [route],
        clock=clock,
        rng=random.Random(1),
        specs={"local": ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=100)},
    )
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))  # type: ignore[arg-type]
    return fleet, route, clock, tenant


def test_a_running_call_keeps_its_prompt_and_reserves_its_answer() -> None:
    fleet, route, clock, tenant = _fleet()
    long = chain("long", 40)
    plan = fleet.plan(route, tenant, "s1", prepared(long), 40 * 16, 10 * 16)
    fleet.on_dispatch(plan.attempts[0], "s1", prepared(long))
    assert fleet.index.pinned(KEY) == 40 + 10  # prompt blocks + answer blocks reserved
    for i in range(5):  # other sessions' calls come and go while the long one runs
        h = chain(f"other{i}", 20)
        p = fleet.plan(route, tenant, f"o{i}", prepared(h), 20 * 16, 16)
        fleet.on_dispatch(p.attempts[0], f"o{i}", prepared(h))
        fleet.on_complete(p.attempts[0], Usage(20 * 16, 16), ok=True)
        fleet.extend(p.attempts[0], h + chain(f"answer{i}", 1))
        clock.now += 1
    assert fleet.index.matched_blocks(KEY, long) == 40  # pinned: not aged out
    assert fleet.index.size(KEY) == 100 - 10  # the LRU got what the call leaves free
    fleet.on_complete(plan.attempts[0], Usage(40 * 16, 10 * 16), ok=True)
    assert fleet.index.pinned(KEY) == 0
    fleet.extend(plan.attempts[0], long + chain("long answer", 10))
    assert fleet.index.matched_blocks(KEY, long) == 40  # now the most recent entries
    fresh = chain("fresh", 60)
    p = fleet.plan(route, tenant, "f", prepared(fresh), 60 * 16, 16)
    fleet.on_dispatch(p.attempts[0], "f", prepared(fresh))
    # the LRU keeps 100 - 61 = 39 blocks: the older ones, the answer, then the prompt's tail go
    assert fleet.index.matched_blocks(KEY, long) == 39


def test_a_failed_call_releases_its_pins() -> None:
    fleet, route, _, tenant = _fleet()
    h = chain("s", 30)
    plan = fleet.plan(route, tenant, "s1", prepared(h), 30 * 16, 64)
    fleet.on_dispatch(plan.attempts[0], "s1", prepared(h))
    assert fleet.index.pinned(KEY) == 30 + 4
    fleet.on_complete(plan.attempts[0], Usage(), ok=False)
    fleet.on_complete(plan.attempts[0], Usage(), ok=False)  # idempotent: released once
    assert fleet.index.pinned(KEY) == 0
    assert fleet.index.matched_blocks(KEY, h) == 30  # the prompt stays cached, unpinned
