"""The stateful fleet (gateway/fleet/routing_port.py) around the pure router: load accounting, stickiness,
drain on failure, health checks by one-token generations, index correction."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator

from adapters.backend import BackendCall
from adapters.errors import ProviderUnavailable
from adapters.types import ChatRequest, ChatResponse, StreamEvent, TextPart, Usage
from gateway.fleet.routing_port import Fleet, FleetConfig, ReplicaSpec
from gateway.ports import Candidate, ModelRoute, PreparedPrompt
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from routing.types import Prices, TokenPrices


class ProbeBackend:
    """A Backend whose one-token generation succeeds or fails on demand; counts probes."""

    kind = "selfhost"
    wire = "openai"

    def __init__(self, name: str) -> None:
        self.name = name
        self.up = True
        self.calls: list[BackendCall] = []

    async def complete(self, call: BackendCall) -> ChatResponse:
        self.calls.append(call)
        if not self.up:
            raise ProviderUnavailable(self.name, "connection refused")
        return ChatResponse("r", call.request.model, (TextPart("p"),), "length", Usage(1, 1))

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        raise NotImplementedError
        yield  # pragma: no cover

    async def aclose(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chain(tag: str, n: int) -> tuple[bytes, ...]:
    out, parent = [], b""
    for i in range(n):
        parent = hashlib.blake2b(parent + f"{tag}:{i}".encode(), digest_size=8).digest()
        out.append(parent)
    return tuple(out)


def prepared(hashes: tuple[bytes, ...]) -> PreparedPrompt:
    req = ChatRequest(model="smollm2", messages=())
    return PreparedPrompt(
        body={}, request=req, session_root="root", cache_salt="salt", prefix_hashes=hashes
    )


def setup(
    venue: str = "selfhost_only",
) -> tuple[Fleet, ModelRoute, Clock, dict[str, ProbeBackend], TenantPolicy]:
    backends = {n: ProbeBackend(n) for n in ("a", "b", "bedrock")}
    route = ModelRoute(
        "smollm2",
        (
            Candidate(backends["a"], "local", "selfhost", "http://a"),
            Candidate(backends["b"], "local", "selfhost", "http://b"),
            Candidate(backends["bedrock"], "bedrock", "api"),
        ),
    )
    clock = Clock()
    prices = Prices(api={"bedrock": TokenPrices(3.0, 15.0, 0.3, 3.75)})
    fleet = Fleet(
        [route],
        FleetConfig(cooldown_s=30.0, failures_to_drain=2),
        prices=prices,
        clock=clock,
        rng=random.Random(1),
        specs={"local": ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=1000)},
    )
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue=venue))  # type: ignore[arg-type]
    return fleet, route, clock, backends, tenant


def test_session_sticks_and_load_is_counted_and_released() -> None:
    fleet, route, clock, _, tenant = setup()
    h = chain("s", 100)
    plan = fleet.plan(route, tenant, "s1", prepared(h), 1600, 50)
    first = plan.attempts[0]
    assert (first.candidate.replica, first.reason) == ("http://a", "least_ttft")
    assert [a.candidate.replica for a in plan.attempts[1:]] == ["http://b"]
    assert plan.details["predicted_cached_tokens"] == 0
    fleet.on_dispatch(first, "s1", prepared(h))
    state = {r.url: r for r in fleet.stats().replicas}
    assert (state["http://a"].inflight_requests, state["http://a"].inflight_tokens) == (1, 1600)
    fleet.on_complete(first, Usage(input_tokens=1600, output_tokens=40), ok=True)
    fleet.on_complete(first, Usage(input_tokens=1600, output_tokens=40), ok=True)  # idempotent
    state = {r.url: r for r in fleet.stats().replicas}
    assert (state["http://a"].inflight_requests, state["http://a"].inflight_tokens) == (0, 0)
    # next turn appends to the conversation: sticky, and the index predicts the shared prefix
    clock.now += 5
    h2 = h + chain("turn2", 20)
    plan2 = fleet.plan(route, tenant, "s1", prepared(h2), 1920, 50)
    assert (plan2.attempts[0].candidate.replica, plan2.attempts[0].reason) == ("http://a", "sticky")
    assert plan2.details["predicted_cached_tokens"] == 1600


def test_first_token_releases_prefill_work_but_not_the_request() -> None:
    fleet, route, _, _, tenant = setup()
    plan = fleet.plan(route, tenant, "s1", prepared(chain("x", 10)), 160, 10)
    fleet.on_dispatch(plan.attempts[0], "s1", prepared(chain("x", 10)))
    fleet.on_first_token(plan.attempts[0])
    r = next(r for r in fleet.stats().replicas if r.url == "http://a")
    assert (r.inflight_requests, r.inflight_tokens) == (1, 0)
    fleet.on_complete(plan.attempts[0], Usage(), ok=False)  # disconnect: released, no session
    r = next(r for r in fleet.stats().replicas if r.url == "http://a")
    assert (r.inflight_requests, r.inflight_tokens) == (0, 0)
    assert fleet.stats().sessions == 0


def test_repeated_failures_drain_then_the_first_good_probe_restores() -> None:
    fleet, route, clock, backends, tenant = setup()
    for _ in range(2):
        plan = fleet.plan(route, tenant, "s-fail", prepared(()), 100, 10)
        assert plan.attempts[0].candidate.replica == "http://a"
        fleet.on_dispatch(plan.attempts[0], "s-fail", prepared(()))
        fleet.on_complete(plan.attempts[0], Usage(), ok=False)
    plan = fleet.plan(route, tenant, "s2", prepared(()), 100, 10)
    assert plan.attempts[0].candidate.replica == "http://b"
    drained = [s for s in plan.details["scores"] if s["replica"] == "local@http://a"]
    assert drained[0]["eligible"] is False and drained[0]["note"] == "unhealthy"
    # a drained replica is probed too: still down, it stays drained (its cool-down unchanged)
    backends["a"].up = False
    until = fleet.registry.replicas["local@http://a"].drained_until
    assert asyncio.run(fleet.check_health()) == {"local@http://a": False, "local@http://b": True}
    assert backends["a"].calls[-1].request.max_tokens == 1
    assert fleet.registry.replicas["local@http://a"].drained_until == until
    clock.now += 5  # within the cool-down: a good probe brings it back at once
    backends["a"].up = True
    assert asyncio.run(fleet.check_health()) == {"local@http://a": True, "local@http://b": True}
    plan = fleet.plan(route, tenant, "s3", prepared(()), 100, 10)
    assert plan.attempts[0].candidate.replica == "http://a"


def test_engine_reported_hits_correct_the_index_and_measure_accuracy() -> None:
    fleet, route, clock, _, tenant = setup()
    h = chain("c", 100)
    for reported in (None, 800):
        plan = fleet.plan(route, tenant, "s1", prepared(h), 1600, 10)
        fleet.on_dispatch(plan.attempts[0], "s1", prepared(h))
        cached = 0 if reported is None else reported
        fleet.on_complete(
            plan.attempts[0], Usage(1600 - cached, 10, cache_read_tokens=cached), ok=True
        )
        clock.now += 1
    stats = fleet.stats()
    # second call predicted 1599 cached tokens (whole prompt minus one), engine said 800
    assert (stats.predicted_cached_tokens, stats.reported_cached_tokens) == (1599, 800)
    assert stats.abs_error_tokens == 799
    assert fleet.index.capacity("local@http://a") == 990  # a clear shortfall shrinks it by 1 %


def test_overflow_goes_to_the_api_and_the_session_follows() -> None:
    fleet, route, clock, _, _ = setup()
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="cheapest", ttft_slo_s=1.0))
    plan = fleet.plan(route, tenant, "big", prepared(()), 5000, 10)  # 5 s prefill > 1 s SLO
    assert plan.attempts[0].candidate.backend_name == "bedrock"
    assert plan.details["reason"] == "overflow_headroom:api_cheapest"
    assert [a.candidate.replica for a in plan.attempts[1:]] == ["http://a", "http://b"]
    fleet.on_dispatch(plan.attempts[0], "big", prepared(()))
    fleet.on_complete(plan.attempts[0], Usage(10, 20, cache_write_tokens=4990), ok=True)
    clock.now += 10
    plan = fleet.plan(route, tenant, "big", prepared(()), 5100, 10)
    assert (plan.attempts[0].candidate.backend_name, plan.details["reason"]) == (
        "bedrock",
        "provider_warm",
    )
    assert plan.details["predicted_cached_tokens"] == 5020


def test_tenant_backend_allow_list_limits_candidates() -> None:
    fleet, route, _, _, _ = setup()
    tenant = TenantPolicy(tenant="acme", backends=("bedrock",))
    plan = fleet.plan(route, tenant, "s", prepared(()), 100, 10)
    assert [a.candidate.backend_name for a in plan.attempts] == ["bedrock"]


def test_a_backend_shared_by_two_model_routes_serves_both() -> None:
    fleet, route, _, backends, tenant = setup()
    alias = ModelRoute("smollm2-alias", route.candidates)
    plan = fleet.plan(alias, tenant, "s-alias", prepared(()), 100, 10)
    assert plan.attempts[0].candidate.backend_name == "local"


def test_sweep_forgets_idle_sessions_and_stray_plans() -> None:
    fleet, route, clock, _, tenant = setup()
    plan = fleet.plan(route, tenant, "done", prepared(()), 100, 10)
    fleet.on_dispatch(plan.attempts[0], "done", prepared(()))
    fleet.on_complete(plan.attempts[0], Usage(100, 5), ok=True)
    fleet.plan(route, tenant, "never-dispatched", prepared(()), 100, 10)
    fleet.health.sweep_sessions()
    assert fleet.stats().sessions == 1 and set(fleet.registry.planned) == {"done"}
    clock.now += 3601
    fleet.health.sweep_sessions()
    assert fleet.stats().sessions == 0 and fleet.registry.planned == {}
