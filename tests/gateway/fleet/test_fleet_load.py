"""The fleet with engine-reported load: scrapes a real local HTTP server, learns the KV size
an engine reports, moves a sticky session off a replica that cannot admit it, and falls back
to its own counts when the engine stops answering."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.types import Usage
from gateway.fleet.routing_port import Fleet, FleetConfig, ReplicaSpec
from gateway.fleet.signals import HttpMetricsSource
from gateway.ports import Candidate, ModelRoute
from gateway.settings import FleetSettings, SettingsError, load_settings
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.fakes.engine_metrics import Engines, bundled
from tests.routing.test_router_fleet import Clock, ProbeBackend, chain, prepared

VLLM_B = (
    'vllm:num_requests_waiting{model_name="m"} 0\n'
    'vllm:num_requests_running{model_name="m"} 1\n'
    'vllm:kv_cache_usage_perc{model_name="m"} 0.2\n'
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="500"} 1\n'
)


@pytest.fixture
def engines() -> Iterator[Engines]:
    e = Engines()
    yield e
    e.close()


def build(url: str, clock: Clock) -> tuple[Fleet, ModelRoute, HttpMetricsSource]:
    route = ModelRoute(
        "smollm2",
        (
            Candidate(ProbeBackend("a"), "local", "selfhost", f"{url}/a/v1"),
            Candidate(ProbeBackend("b"), "local", "selfhost", f"{url}/b/v1"),
        ),
    )
    source = HttpMetricsSource(clock, timeout_s=2.0)
    spec = ReplicaSpec(prefill_tok_s=1000.0, kv_capacity_blocks=1000, base_ttft_s=0.05)
    fleet = Fleet(
        [route],
        FleetConfig(signal_interval_s=1.0, signal_max_age_s=5.0, signal_timeout_s=2.0),
        clock=clock,
        rng=random.Random(1),
        specs={"local": spec},
        metrics=source,
    )
    return fleet, route, source


def test_engine_load_reaches_the_scores_and_failures_fall_back(engines: Engines) -> None:
    clock = Clock()
    fleet, route, source = build(engines.url, clock)
    a, b = f"local@{engines.url}/a/v1", f"local@{engines.url}/b/v1"
    tenant = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))
    engines.bodies.update(a=bundled(waiting=0, running=0, kv_usage=0.1), b=VLLM_B)

    async def scenario() -> None:
        assert await fleet.poll_signals() == {a: True, b: True}
        assert fleet.index.nominal(a) == 1000  # configured: this engine did not say its size
        assert fleet.index.nominal(b) == 500  # vLLM said 500 blocks of 16 tokens
        # one turn of s1 on a, two seconds from dispatch to completion
        h = chain("s1", 100)
        plan = fleet.plan(route, tenant, "s1", prepared(h), 1600, 50)
        assert plan.attempts[0].candidate.replica == f"{engines.url}/a/v1"
        fleet.on_dispatch(plan.attempts[0], "s1", prepared(h))
        clock.now += 2.0
        fleet.on_complete(plan.attempts[0], Usage(1600, 50), ok=True)
        # a now reports 3 waiting, a full KV, and its pool size
        engines.bodies["a"] = bundled(waiting=3, running=2, kv_usage=1.0, kv_blocks=160)
        clock.now += 1.0
        assert await fleet.poll_signals() == {a: True, b: True}
        assert fleet.index.nominal(a) == 160  # the engine's own size replaces the setting
        plan = fleet.plan(route, tenant, "s1", prepared(h + chain("t2", 4)), 1664, 50)
        # the queue is in the prediction, but a wait alone does not move the session (it
        # clears as calls finish; the move's recompute would not): the venue reads the wait
        assert plan.details["reason"] == "sticky"
        scores = {s["replica"]: s for s in plan.details["scores"]}
        # a: (3 queued + itself) x 2.0 s service / max(0 running by our count, 1)
        assert scores[a]["wait_ms"] == 8000.0
        assert scores[a]["ttft_ms"] == 8000.0 + 50.0 + 64.0  # 1664 - 1600 cached
        assert (scores[b]["wait_ms"], scores[b]["ttft_ms"]) == (0.0, 50.0 + 1664.0)
        # a stops answering: its last sample is kept while young, then the router falls back
        engines.bodies["a"] = 500
        clock.now += 1.0
        assert await fleet.poll_signals() == {a: False, b: True}
        state = {r.key: r for r in fleet.stats().replicas}
        assert (state[a].queue_depth, state[a].kv_free_blocks, state[a].signal_age_s) == (3, 0, 1.0)
        assert state[b].kv_free_blocks == 400
        clock.now += 1.0
        assert a not in await fleet.poll_signals()  # backing off: not scraped again yet
        clock.now += 4.0
        await fleet.poll_signals()
        state = {r.key: r for r in fleet.stats().replicas}
        assert (state[a].queue_depth, state[a].kv_free_blocks, state[a].signal_age_s) == (
            0,
            None,
            None,
        )
        await source.aclose()

    asyncio.run(scenario())
    assert engines.hits["a"] == 4


def test_a_replica_without_metrics_is_never_scraped(engines: Engines) -> None:
    clock = Clock()
    route = ModelRoute(
        "smollm2", (Candidate(ProbeBackend("a"), "local", "selfhost", f"{engines.url}/a/v1"),)
    )
    source = HttpMetricsSource(clock)
    fleet = Fleet(
        [route],
        clock=clock,
        rng=random.Random(1),
        specs={"local": ReplicaSpec(metrics_path=None)},
        metrics=source,
    )
    assert asyncio.run(fleet.poll_signals()) == {}
    assert Fleet([route], clock=clock, rng=random.Random(1)).signals.last("x") is None
    asyncio.run(source.aclose())
    assert engines.hits == {}


def test_fleet_settings_defaults_and_a_backend_opting_out_of_scrapes(tmp_path: Path) -> None:
    assert FleetSettings() == FleetSettings(
        signal_interval_s=1.0, signal_timeout_s=0.5, signal_max_age_s=5.0, health_interval_s=10.0
    )
    path = tmp_path / "lantern.yaml"
    path.write_text(
        "fleet: {signal_interval_s: 0}\n"
        "models:\n"
        "  - name: m\n"
        "    backends:\n"
        "      - {kind: openai_compatible, name: hosted, base_url: 'https://x/v1', model: m,\n"
        "         metrics_path: null, kv_capacity_blocks: 160}\n"
    )
    settings = load_settings(path)
    backend = settings.models[0].backends[0]
    assert (settings.fleet.signal_interval_s, backend.metrics_path) == (0.0, None)
    path.write_text("fleet: {signal_timeout_s: 0}\n")
    with pytest.raises(SettingsError, match="fleet.signal_timeout_s"):
        load_settings(path)
