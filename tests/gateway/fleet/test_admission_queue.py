"""A replica at capacity: calls wait in per-tenant fair order, are shed with a retry hint past
their tenant's bound, and every way out gives the slot back (gateway/fleet/admission_queue.py,
gateway/fleet/capacity.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from adapters.types import Usage
from gateway.fleet.admission_queue import QueueShed, ReplicaSlots
from gateway.fleet.engine_metrics import EngineLoad
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.state import ReplicaSpec
from gateway.ports import Candidate, ModelRoute, RoutePlan
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.routing.test_router_fleet import Clock, ProbeBackend, prepared

KEY = "local@http://a"


def tenant(name: str, **routing: object) -> TenantPolicy:
    return TenantPolicy(tenant=name, routing=RoutingPolicy(venue="selfhost_only", **routing))  # type: ignore[arg-type]


def fleet_of(max_in_flight: int | None) -> tuple[Fleet, ModelRoute]:
    route = ModelRoute("smollm2", (Candidate(ProbeBackend("a"), "local", "selfhost", "http://a"),))  # type: ignore[arg-type]
    specs = {"local": ReplicaSpec(max_in_flight=max_in_flight)}
    return Fleet([route], FleetConfig(), clock=Clock(), rng=random.Random(1), specs=specs), route


def plan(fleet: Fleet, route: ModelRoute, t: TenantPolicy, s: str) -> RoutePlan:
    return fleet.plan(route, t, s, prepared(()), 100, 10)


def test_without_a_capacity_nothing_is_queued() -> None:
    fleet, route = fleet_of(None)
    for i in range(10):
        assert fleet.queue(plan(fleet, route, tenant("acme"), f"s{i}"), tenant("acme")) is None
    assert fleet.gate.slots.held(KEY) == 0


def test_calls_beyond_capacity_are_served_in_fair_order() -> None:
    fleet, route = fleet_of(2)
    acme, globex = tenant("acme"), tenant("globex")

    async def go() -> list[str]:
        served: list[str] = []
        held = [plan(fleet, route, acme, f"h{i}") for i in range(2)]
        assert [fleet.queue(p, acme) for p in held] == [None, None]  # the fast path

        async def call(t: TenantPolicy, name: str) -> None:
            p = plan(fleet, route, t, name)
            waiting = fleet.queue(p, t)
            assert waiting is not None
            p = await waiting
            served.append(name)
            held.append(p)

        tasks = [asyncio.ensure_future(call(acme, f"a{i}")) for i in range(4)]
        await asyncio.sleep(0)
        tasks.append(asyncio.ensure_future(call(globex, "g0")))
        await asyncio.sleep(0)
        assert fleet.gate.slots.waiting(KEY) == 5
        while len(served) < 5:
            done = held.pop(0)
            fleet.on_complete(done.attempts[0], Usage(100, 10), ok=True)  # never dispatched
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert fleet.gate.slots.held(KEY) == 2 and fleet.gate.slots.waiting(KEY) == 0
        return served

    assert asyncio.run(go()) == ["a0", "g0", "a1", "a2", "a3"]


def test_a_wait_past_the_bound_is_shed_holding_nothing() -> None:
    fleet, route = fleet_of(1)
    fleet.registry.replicas[KEY].service_s = 0.2
    acme = tenant("acme", max_queue_ms=500)

    async def go() -> None:
        first = plan(fleet, route, acme, "s0")
        assert fleet.queue(first, acme) is None
        # 1 slot, 0.2 s a call: the 3rd waiter would start after 0.6 s > 0.5 s
        waits = [
            asyncio.ensure_future(fleet.queue(plan(fleet, route, acme, f"s{i}"), acme))  # type: ignore[arg-type]
            for i in (1, 2)
        ]
        await asyncio.sleep(0)
        with pytest.raises(QueueShed) as shed:
            await fleet.queue(plan(fleet, route, acme, "s3"), acme)  # type: ignore[misc]
        assert shed.value.wait_s == pytest.approx(0.6)
        assert shed.value.retry_after_s == 1
        assert fleet.gate.slots.waiting(KEY) == 2
        for w in waits:  # the caller went away: out of the queue, holding nothing
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        assert fleet.gate.slots.waiting(KEY) == 0 and fleet.gate.slots.held(KEY) == 1
        fleet.release(first)
        assert fleet.gate.slots.held(KEY) == 0

    asyncio.run(go())


def test_the_wait_itself_is_bounded() -> None:
    """No service time known yet: nothing predicts the wait, the bound cuts it."""
    slots = ReplicaSlots(Clock())

    async def go() -> None:
        assert slots.take(KEY, 1)
        with pytest.raises(QueueShed) as shed:
            await slots.wait(KEY, 1, "acme", weight=1.0, max_wait_s=0.05, service_s=None)
        assert shed.value.rule == "max_queue_ms"
        assert (slots.held(KEY), slots.waiting(KEY)) == (1, 0)

    asyncio.run(go())


def test_a_slot_granted_as_its_caller_leaves_passes_on() -> None:
    slots = ReplicaSlots(Clock())

    async def go() -> None:
        assert slots.take(KEY, 1)
        kw = {"weight": 1.0, "max_wait_s": 5.0, "service_s": None}
        first = asyncio.ensure_future(slots.wait(KEY, 1, "acme", **kw))  # type: ignore[arg-type]
        second = asyncio.ensure_future(slots.wait(KEY, 1, "globex", **kw))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        slots.release(KEY)  # granted to `first` ...
        first.cancel()  # ... which leaves before it runs: `second` gets the slot
        await asyncio.gather(first, return_exceptions=True)
        assert await second == 0.0
        assert (slots.held(KEY), slots.waiting(KEY)) == (1, 0)

    asyncio.run(go())


def test_the_engines_batch_size_is_the_capacity_when_none_is_set() -> None:
    fleet, _ = fleet_of(None)
    assert fleet.gate.capacity(KEY) is None
    fleet.observe_load(KEY, EngineLoad(1.0, waiting=0, running=3))
    assert fleet.gate.capacity(KEY) is None  # not full: says nothing of its size
    fleet.observe_load(KEY, EngineLoad(2.0, waiting=5, running=8))
    fleet.observe_load(KEY, EngineLoad(3.0, waiting=2, running=6))
    assert fleet.gate.capacity(KEY) == 8
