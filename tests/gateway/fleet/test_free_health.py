"""Health that costs nothing: over ten health intervals, wire-level fakes count what each kind of
backend receives. An engine gets GET /health, an OpenAI-compatible API (an embeddings-only one
too) GET /models, never a chat call; a backend with no free endpoint gets one one-token probe
per `paid_probe_interval_s`, not one per interval (gateway/fleet/health.py)."""

from __future__ import annotations

import asyncio
import random

import httpx

from adapters.backends.factory import build_backend
from adapters.backends.spec import BackendSpec
from adapters.http.upstream import HttpxPool
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.ports import Candidate, ModelRoute
from tests.fakes.upstream import FakeUpstream
from tests.routing.test_router_fleet import Clock, ProbeBackend

INTERVAL_S = 10.0


def paths(upstream: FakeUpstream) -> list[str]:
    return [r.path for r in upstream.requests]


def test_ten_intervals_cost_no_generation_where_a_free_endpoint_exists() -> None:
    with FakeUpstream() as vllm, FakeUpstream() as api, FakeUpstream() as embeds:
        embeds.app.fail_next(400, 100, message="this server only embeds")  # chat refused

        async def go() -> tuple[list[dict[str, bool]], Fleet, ProbeBackend]:
            pool = HttpxPool(httpx.AsyncClient())
            specs = [
                BackendSpec(
                    "vllm",
                    "openai_compatible",
                    vllm.openai_base_url,
                    "m",
                    None,
                    30.0,
                    {"engine": "vllm"},
                ),
                BackendSpec("api", "openai_compatible", api.openai_base_url, "m", "sk-test"),
                BackendSpec("embeds", "openai_compatible", embeds.openai_base_url, "m"),
            ]
            cands = [
                Candidate(build_backend(s, http=pool), s.name, "selfhost", s.base_url)
                for s in specs
            ]
            bare = ProbeBackend("bare")  # no free endpoint: generation only
            cands.append(Candidate(bare, "bare", "selfhost", "http://bare"))  # type: ignore[arg-type]
            routes = [ModelRoute(c.backend_name, (c,)) for c in cands]
            clock = Clock()
            config = FleetConfig(paid_probe_interval_s=30.0)
            fleet = Fleet(routes, config, clock=clock, rng=random.Random(1))
            results = []
            for _ in range(10):
                results.append(await fleet.check_health())
                clock.now += INTERVAL_S
            return results, fleet, bare

        results, fleet, bare = asyncio.run(go())

    assert all(all(r.values()) for r in results)  # every replica healthy throughout
    assert paths(vllm) == ["/health"] * 10
    assert paths(api) == ["/v1/models"] * 10
    assert all(r.headers["authorization"] == "Bearer sk-test" for r in api.requests)
    assert paths(embeds) == ["/v1/models"] * 10  # never a chat call: never drained
    assert len(bare.calls) == 4  # at 0, 30, 60 and 90 s: one per paid_probe_interval_s
    assert fleet.health.num_paid_probes == 4
