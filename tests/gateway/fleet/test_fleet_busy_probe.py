"""A replica whose health probe fails while it ends calls well is busy, not down: the probe
queued behind the calls it serves (a CPU engine under load), so it is kept; one that served
nothing meanwhile is drained as before."""

from __future__ import annotations

import asyncio
import random

from adapters.backend import BackendCall
from adapters.errors import ProviderUnavailable
from adapters.types import ChatResponse, Usage
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.ports import Candidate, ModelRoute
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.routing.test_router_fleet import Clock, ProbeBackend, prepared


class SlowProbe(ProbeBackend):
    """Its probe waits for `release`, then fails (the probe's timeout, as the fleet sees it)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.waiting, self.release = asyncio.Event(), asyncio.Event()

    async def complete(self, call: BackendCall) -> ChatResponse:
        self.calls.append(call)
        self.waiting.set()
        await self.release.wait()
        raise ProviderUnavailable(self.name, "probe timed out")


def check_while(serve: bool) -> tuple[dict[str, bool], bool]:
    """Probe while a call to replica a is in flight; it ends (well when `serve`) before the
    probe's failure comes back. (the check's answer for a, whether a is still healthy)"""
    slow = SlowProbe("a")
    route = ModelRoute(
        "smollm2",
        (
            Candidate(slow, "local", "selfhost", "http://a"),  # type: ignore[arg-type]
            Candidate(ProbeBackend("b"), "local", "selfhost", "http://b"),  # type: ignore[arg-type]
        ),
    )
    fleet = Fleet([route], FleetConfig(cooldown_s=30.0), clock=Clock(), rng=random.Random(1))
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))

    async def go() -> dict[str, bool]:
        attempt = fleet.plan(route, tenant, "s1", prepared(()), 100, 10).attempts[0]
        assert attempt.candidate.replica == "http://a"
        fleet.on_dispatch(attempt, "s1", prepared(()))
        checking = asyncio.ensure_future(fleet.check_health())
        await slow.waiting.wait()
        fleet.on_complete(attempt, Usage(100, 10), ok=serve)
        slow.release.set()
        return await checking

    health = asyncio.run(go())
    return health, fleet.registry.replicas["local@http://a"].healthy


def test_a_probe_that_fails_while_the_replica_serves_calls_keeps_it() -> None:
    health, healthy = check_while(serve=True)
    assert health["local@http://a"] is True and healthy


def test_a_probe_that_fails_while_nothing_was_served_drains_it() -> None:
    health, healthy = check_while(serve=False)
    assert health["local@http://a"] is False and not healthy


def test_a_probe_that_times_out_while_calls_are_still_in_flight_keeps_it() -> None:
    """A busy engine: the probe queued behind calls that have not ended yet when it times out.
    Nothing ended well meanwhile, but calls were in flight throughout: busy, not down."""
    slow = SlowProbe("a")
    route = ModelRoute("smollm2", (Candidate(slow, "local", "selfhost", "http://a"),))  # type: ignore[arg-type]
    fleet = Fleet([route], FleetConfig(cooldown_s=30.0), clock=Clock(), rng=random.Random(1))
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))

    async def go() -> dict[str, bool]:
        attempt = fleet.plan(route, tenant, "s1", prepared(()), 100, 10).attempts[0]
        fleet.on_dispatch(attempt, "s1", prepared(()))
        checking = asyncio.ensure_future(fleet.check_health())
        await slow.waiting.wait()
        slow.release.set()
        return await checking

    assert asyncio.run(go()) == {"local@http://a": True}
    assert fleet.registry.replicas["local@http://a"].healthy


def test_a_replica_that_answered_well_recently_is_not_probed() -> None:
    """Passive health: under traffic the calls themselves say the replica serves; the periodic
    check sends no probe to it (a probe is a generation, paid on a hosted engine)."""
    backend = ProbeBackend("a")
    route = ModelRoute("smollm2", (Candidate(backend, "local", "selfhost", "http://a"),))  # type: ignore[arg-type]
    clock = Clock()
    fleet = Fleet([route], FleetConfig(), clock=clock, rng=random.Random(1))
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))
    attempt = fleet.plan(route, tenant, "s1", prepared(()), 100, 10).attempts[0]
    fleet.on_dispatch(attempt, "s1", prepared(()))
    fleet.on_complete(attempt, Usage(100, 1), ok=True)
    assert asyncio.run(fleet.health.check(passive_s=10.0)) == {}
    assert backend.calls == []
    clock.now += 10.0  # no answer for a whole interval: probed again
    assert asyncio.run(fleet.health.check(passive_s=10.0)) == {"local@http://a": True}
    assert len(backend.calls) == 1
