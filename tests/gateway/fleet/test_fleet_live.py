"""The fleet's live working set per replica (blocks its sessions touched recently) and how a
fork spills off a replica that it fills, through the real Fleet and its index."""

from __future__ import annotations

import random

from adapters.types import Usage
from gateway.fleet.routing_port import Fleet, FleetConfig, ReplicaSpec
from gateway.ports import Candidate, ModelRoute
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.routing.test_router_fleet import Clock, chain, prepared


def _fleet(window_s: float = 10.0) -> tuple[Fleet, ModelRoute, Clock, TenantPolicy]:
    route = ModelRoute(
        "smollm2",
        (
            Candidate(None, "local", "selfhost", "http://a"),  # type: ignore[arg-type]
            Candidate(None, "local", "selfhost", "http://b"),  # type: ignore[arg-type]
        ),
    )
    clock = Clock()
    fleet = Fleet(
        [route],
        FleetConfig(live_window_s=window_s),
        clock=clock,
        rng=random.Random(1),
        specs={"local": ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=1000)},
    )
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))  # type: ignore[arg-type]
    return fleet, route, clock, tenant


def _live(fleet: Fleet) -> dict[str | None, int]:
    return {r.url: r.live_blocks for r in fleet.stats().replicas}


def test_live_blocks_follow_dispatches_and_answers_within_the_window() -> None:
    fleet, route, clock, tenant = _fleet()
    h = chain("s", 100)
    plan = fleet.plan(route, tenant, "s1", prepared(h), 1600, 32)
    fleet.on_dispatch(plan.attempts[0], "s1", prepared(h))
    assert _live(fleet) == {"http://a": 100, "http://b": 0}
    clock.now += 6
    fleet.on_complete(plan.attempts[0], Usage(1600, 32), ok=True)
    fleet.extend(plan.attempts[0], h + chain("answer", 2))
    clock.now += 6  # the prompt was dispatched 12 s ago, but the answer re-touched it
    assert _live(fleet) == {"http://a": 102, "http://b": 0}
    clock.now += 11  # the session went quiet: its blocks are still held, no longer live
    assert _live(fleet) == {"http://a": 0, "http://b": 0}
    assert fleet.index.matched_blocks("local@http://a", h) == 100


def test_a_fork_spills_while_live_sessions_fill_its_parent_replica_then_returns() -> None:
    fleet, route, clock, tenant = _fleet()
    first = chain("p", 600)
    second = first + chain("turn2", 395)  # the parent's next turn: sticky, a holds 995 live
    for h, hit in ((first, 0), (second, 600 * 16)):
        plan = fleet.plan(route, tenant, "parent", prepared(h), len(h) * 16, 64)
        assert plan.attempts[0].candidate.replica == "http://a"
        fleet.on_dispatch(plan.attempts[0], "parent", prepared(h))
        fleet.on_complete(plan.attempts[0], Usage(len(h) * 16 - hit, 64, hit), ok=True)
    assert _live(fleet) == {"http://a": 995, "http://b": 0}
    fork = first + chain("f", 5)  # a sub-agent forked from the first turn's context
    spill = fleet.plan(route, tenant, "fork", prepared(fork), 605 * 16, 64)
    assert (spill.attempts[0].candidate.replica, spill.attempts[0].reason) == (
        "http://b",
        "least_ttft",
    )
    rooms = {s["replica"]: s["room_blocks"] for s in spill.details["scores"]}  # type: ignore[union-attr,index]
    assert rooms == {"local@http://a": 1000 - 995 - 9, "local@http://b": 1000 - 609}
    clock.now += 11  # the parent went quiet: its blocks are cached, not in live use
    later = fleet.plan(route, tenant, "fork2", prepared(fork), 605 * 16, 64)
    assert (later.attempts[0].candidate.replica, later.attempts[0].reason) == (
        "http://a",
        "prefix_match",
    )
