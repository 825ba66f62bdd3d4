"""A session id is the client's to choose, so another tenant can send yours (guessed, or read
from a log): globex sending acme's session id changes nothing acme sees. Through a real
gateway: acme's cache diagnosis header and its `calls_per_session` count (memory and Redis
quotas). Through the pipeline over the real fleet of two replicas, with and without the shared
affinity in the real Redis: where acme's next calls go and why, against the same calls with no
globex. Through the pipeline over the provider prompt-cache fake: acme's keep-warm session."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from adapters.types import ChatRequest, Message, TextPart
from gateway.core.admission import Admission
from gateway.core.keep_warm import DOOR
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.core.prompt_cache import PromptCachePort
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.sharing import FleetSharing
from gateway.ports import Candidate, ModelRoute
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from quotas.memory import MemoryQuotaStore
from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream
from tests.gateway.core.pipeline_harness import Parts, ScriptedBackend
from tests.gateway.core.test_keep_warm import World
from tests.gateway.core.test_keep_warm import tenant as warm_tenant
from tests.quotas.conftest import delete_prefix

SESSION = "acme-run-7"  # acme's session id, which globex sends too

# --- a real gateway: the diagnosis header and the session budget --------------------------


@pytest.fixture(params=["memory", "redis"])
def gateway(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RunningGateway, str, str]]:
    """acme (`calls_per_session: 3`) and globex, names unique to the run (the Redis is shared)."""
    run = uuid.uuid4().hex[:8]
    acme, globex = f"lt-acme-{run}-key-001", f"lt-globex-{run}-key-01"
    (tmp_path / "policies").mkdir()
    limits = {"calls_per_session": 3}
    write_policy(tmp_path / "policies", f"acme-{run}", acme, limits=limits)
    write_policy(tmp_path / "policies", f"globex-{run}", globex)
    extra: dict[str, Any] = {}
    if request.param == "redis":
        request.getfixturevalue("redis_url")  # skips without a Redis server
        extra["redis_url"] = "redis://127.0.0.1:6379/0"
    with FakeUpstream() as upstream:
        config = write_config(tmp_path / "lantern.yaml", tmp_path, models_for(upstream), **extra)
        running = start_gateway(config)
        try:
            yield running, acme, globex
        finally:
            running.stop()


def chat(client: httpx.Client, key: str, turns: int, session: str = SESSION) -> httpx.Response:
    system = "You fix failing tests in a large repository." + " rule" * 1500
    messages: list[dict[str, str]] = []
    for t in range(turns):
        if t:
            messages.append({"role": "assistant", "content": f"Step {t} done."})
        messages.append({"role": "user", "content": f"Go on with step {t}."})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "system": system, "messages": messages}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "x-session-id": session}
    return client.post("/v1/messages", json=body, headers=headers)


def test_another_tenant_sending_your_session_id_leaves_your_diagnosis_and_budget(
    gateway: tuple[RunningGateway, str, str],
) -> None:
    running, acme, globex = gateway
    with httpx.Client(base_url=running.url, timeout=30) as client:
        first = chat(client, acme, 1)
        # globex sends acme's session id: its own first call, and past acme's budget of 3
        theirs = [chat(client, globex, 1 + n % 2) for n in range(4)]
        second, third = chat(client, acme, 2), chat(client, acme, 3)
        over = chat(client, acme, 4)
    assert [r.status_code for r in (first, *theirs, second, third)] == [200] * 7
    assert theirs[0].headers["x-lantern-cache"].startswith("first_call; ")
    # acme's session saw only acme's calls: each one read what the previous one left
    assert second.headers["x-lantern-cache"].startswith("kept; ")
    assert third.headers["x-lantern-cache"].startswith("kept; ")
    assert second.headers["x-lantern-session"] == SESSION  # the client's id, as it sent it
    # its budget counted its own three calls only: the fourth is refused
    assert (over.status_code, over.headers.get("x-lantern-limit")) == (429, "calls_per_session")


# --- the pipeline over the real fleet: where acme's calls go -------------------------------

ACME = TenantPolicy.model_validate({"tenant": "acme", "routing": {"venue": "selfhost_only"}})
# globex may use the right replica only: its calls land away from acme's
GLOBEX = TenantPolicy.model_validate(
    {"tenant": "globex", "routing": {"venue": "selfhost_only"}, "backends": ["right"]}
)


def fleet_pipeline(redis_url: str | None = None, prefix: str = "") -> Pipeline:
    """One gateway process: two self-hosted replicas, the real fleet, prompt port, admission."""
    left, right = ScriptedBackend(), ScriptedBackend()
    route = ModelRoute(
        "m",
        (
            Candidate(left, "left", "selfhost", "http://left/v1"),  # type: ignore[arg-type]
            Candidate(right, "right", "selfhost", "http://right/v1"),  # type: ignore[arg-type]
        ),
    )
    parts = Parts(route)
    fleet = Fleet([route], FleetConfig(), clock=lambda: 1000.0, rng=random.Random(7))
    if redis_url is not None:
        fleet.share(
            FleetSharing.from_url(
                redis_url,
                sessions=fleet.registry.sessions,
                index=lambda: fleet.index,
                clock=lambda: 1000.0,
                key_prefix=prefix,
                registry=CollectorRegistry(),
            )
        )
    services = PipelineParts(
        models=parts,
        counter=parts,
        pricing=parts,
        admission=Admission(MemoryQuotaStore()),
        prompts=PromptCachePort(b"secret", registry=CollectorRegistry(), clock=lambda: 1000.0),
        routing=fleet,
        ledger=parts,
        telemetry=Telemetry(TracerProvider(), Metrics()),
        clock=lambda: 1000.0,
        defer_bookkeeping=False,
    )
    return Pipeline(services)


def fleet_call(tenant: TenantPolicy, turns: int) -> IncomingCall:
    words = " ".join(f"w{i}" for i in range(400))  # 25 blocks of 16 tokens
    text = f"{tenant.tenant}: {words} " + " ".join(f"turn{t}" for t in range(turns))
    request = ChatRequest(model="m", messages=(Message("user", (TextPart(text),)),), max_tokens=8)
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    return IncomingCall("openai", tenant, "k1", request, body, session_header=SESSION)


def route_of(plan_details: Any) -> tuple[object, ...]:
    d = plan_details
    return (d["replica"], d["reason"], d["predicted_cached_tokens"])


async def acme_calls(
    pipeline: Pipeline, globex_between: bool, then: Pipeline | None = None
) -> list[tuple[object, ...]]:
    """acme's three calls of one session; with `globex_between`, globex calls with acme's
    session id after acme's first, and once more between acme's second's plan and its dispatch.
    `then`: a second gateway process (sharing the affinity) that serves acme's third call, after
    the first process drained acme's replica (acme's second call moves, the move is shared)."""
    fleet: Fleet = pipeline.s.routing  # type: ignore[assignment]
    seen = []
    adm = await pipeline.admit(fleet_call(ACME, 1))
    await pipeline.complete(adm)
    seen.append(route_of(adm.plan.details))
    if then is not None:
        fleet.health.drain(str(adm.plan.details["replica"]), 1000.0)
    if globex_between:
        await pipeline.complete(await pipeline.admit(fleet_call(GLOBEX, 1)))
    adm = await pipeline.admit(fleet_call(ACME, 2))  # planned: recalled, not yet dispatched
    if globex_between:
        await pipeline.complete(await pipeline.admit(fleet_call(GLOBEX, 2)))
    await pipeline.complete(adm)
    seen.append(route_of(adm.plan.details))
    if fleet.sharing is not None:
        await fleet.sharing.affinity.flush()
    third = then or pipeline
    adm = await third.admit(fleet_call(ACME, 3))
    await third.complete(adm)
    seen.append(route_of(adm.plan.details))
    return seen


def test_another_tenant_sending_your_session_id_leaves_your_routing() -> None:
    alone = asyncio.run(acme_calls(fleet_pipeline(), globex_between=False))
    disturbed = asyncio.run(acme_calls(fleet_pipeline(), globex_between=True))
    assert alone[0][0] == "left@http://left/v1"  # away from globex's replica
    assert disturbed == alone


@pytest.mark.redis
def test_another_tenant_sending_your_session_id_leaves_your_shared_affinity(
    redis_url: str, redis_prefix: str
) -> None:
    """acme's third call is served by a second gateway process, which knows where acme's
    session is only through the shared affinity the first one committed."""

    async def run(globex_between: bool, prefix: str) -> Any:
        one, two = fleet_pipeline(redis_url, prefix), fleet_pipeline(redis_url, prefix)
        try:
            return await acme_calls(one, globex_between, then=two)
        finally:
            for p in (one, two):
                await p.s.routing.sharing.stop()  # type: ignore[attr-defined]

    try:
        alone = asyncio.run(run(False, redis_prefix + "alone:"))
        disturbed = asyncio.run(run(True, redis_prefix + "disturbed:"))
    finally:
        delete_prefix(redis_url, redis_prefix)
    # acme's session moved off its drained replica, and the other process follows the move
    assert alone[1][0] != alone[0][0] and alone[2][0] == alone[1][0]
    assert disturbed == alone


# --- keep-warm -----------------------------------------------------------------------------


def test_another_tenant_sending_your_session_id_leaves_your_keep_warm_session() -> None:
    """`World.call` sends session id `s1` for every tenant: globex's call, with acme's very
    prompt, keeps a session of its own; acme's entry and its read stay as with no globex."""

    async def acme_warm(globex_between: bool) -> tuple[list[object], list[str]]:
        world = World()
        await world.paused_session(warm_tenant("acme", keep_warm=True))
        if globex_between:
            await world.call(warm_tenant("globex", keep_warm=True), 3)
        world.clock.now_s += 281  # acme's entry expires at 300 s: its read is due
        entries = [(k, s.last_s, s.prefix_tokens) for k, s in world.warm.sessions.items()]
        await world.warm.tick()
        reads = [row.tenant for row in world.rows(DOOR) if row.tenant == "acme"]
        return [e for e in entries if e[0][0] == "acme"], reads

    alone, disturbed = asyncio.run(acme_warm(False)), asyncio.run(acme_warm(True))
    assert len(alone[0]) == 1 and alone[1] == ["acme"]  # one warm session, read once
    assert disturbed == alone
