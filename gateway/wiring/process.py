"""Builds every long-lived part of one gateway process from its settings (the ledger in
`ledger.py`, the other parts in `parts.py`, the pipeline over them in `pipeline.py`), and starts
and stops them. The pipeline sees ports (gateway/ports.py).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from adapters.http.http1.pool import Http1Pool
from gateway.apikeys.keyring import KeyChain, Keyring
from gateway.core.admission import Admission
from gateway.core.cache_learning_shared import SharedPlaces
from gateway.core.engine_tokens import EngineTokenizers
from gateway.core.fanout_shared import SharedLeases
from gateway.core.keep_warm import KeepWarm
from gateway.core.keep_warm_latest import RedisLatestCalls
from gateway.core.models_table import (
    ModelTableImpl,
    RoutePricing,
    build_model_table,
)
from gateway.core.pipeline import Pipeline
from gateway.core.prompt_cache import PromptCachePort
from gateway.core.token_count import RouteTokenCounting
from gateway.http.admin_views import JsonView, build_admin_views
from gateway.http.readiness import HealthCheck
from gateway.http.tools_wiring import ToolsRouter, build_tools
from gateway.ledger.call_ledger import CallLedger
from gateway.ledger.db import session_factory
from gateway.mcp.assembly import build_mcp
from gateway.mcp.door import McpDoor
from gateway.replay.assembly import build_replay
from gateway.replay.service import ReplayService
from gateway.responses.store import MemoryResponseStore, ResponseStore
from gateway.settings import Settings
from gateway.telemetry import Metrics, Telemetry, build_tracer_provider
from gateway.wiring.ledger import build_ledger
from gateway.wiring.parts import (
    FleetParts,
    build_fleet,
    build_policies,
    build_prompt_parts,
    build_response_store,
)
from gateway.wiring.pipeline import build_pipeline
from policies.store import PolicyStore
from quotas.store import QuotaStore

log = logging.getLogger("lantern.wiring")
LEDGER_FIRST_TRY_S = 30.0
# The serving loop shares the interpreter with threads that run Python in stretches (the
# ledger's writer, which checks and inserts a second's rows at once, is the busiest). CPython
# lets the thread holding the GIL keep it for the switch interval before a waiting thread gets
# it; measured on one core at 200 calls/s (two processes of one build, served in turn): p99
# 25 ms at the default 5 ms, 10 ms at 0.5 ms (1 ms gave 18, 0.2 ms 11), p50 and CPU unchanged.
GIL_SWITCH_INTERVAL_S = 0.0005


@dataclass
class GatewayProcess:
    """Every long-lived part of one gateway process, and the steps that start and stop them."""

    pipeline: Pipeline
    policies: PolicyStore
    models: ModelTableImpl
    metrics: Metrics
    admin_views: dict[str, JsonView]
    tools_router: ToolsRouter | None = None
    mcp_door: McpDoor | None = None  # /mcp (gateway/mcp)
    keep_warm: KeepWarm | None = None  # cache.keep_warm reads, told of calls by the pipeline
    response_store: ResponseStore = field(default_factory=lambda: MemoryResponseStore(3600, 1000))
    lookup: KeyChain | None = None  # YAML keys, then keys issued over /admin/keys
    keyring: Keyring | None = None
    sessions: sessionmaker[Session] | None = None  # the ledger database, for admin and console
    readiness_checks: list[HealthCheck] = field(default_factory=list)  # /ready's, beside state
    replay: ReplayService | None = None  # `Idempotency-Key` on the model doors
    on_start: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        for step in self.on_start:
            await step()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for step in reversed(self.on_stop):
            try:
                await step()
            except Exception:  # keep stopping the rest; say what failed
                log.exception("shutdown step failed")


def share_the_gil() -> None:
    """The process's GIL switch interval at most `GIL_SWITCH_INTERVAL_S` (a lower one set by
    the operator is kept)."""
    if sys.getswitchinterval() > GIL_SWITCH_INTERVAL_S:
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


async def fetch_tokenizers(tokenizers: EngineTokenizers, retry_s: float = 2.0) -> None:
    """Each self-hosted replica's tokenizer, once; until then its calls are reserved at an
    upper bound (gateway/core/token_count.py)."""
    async with httpx.AsyncClient() as client:
        while tokenizers.num_missing:
            await tokenizers.fetch_missing(client)
            if tokenizers.num_missing:
                await asyncio.sleep(retry_s)


def _add_shared_state(
    process: GatewayProcess, settings: Settings, clock: Callable[[], float]
) -> None:
    """What the gateway processes share through Redis beside quotas and the fleet (stored
    responses; which process serves each kept-warm session), or keep each to itself."""
    process.response_store = build_response_store(settings, clock)
    process.on_stop.append(process.response_store.aclose)
    replay = build_replay(settings)  # keyed model calls: records shared through Redis too
    process.replay = replay.service
    process.on_start.append(replay.start)
    process.on_stop.append(replay.stop)
    warm = process.keep_warm
    if settings.redis_url and warm is not None:
        latest = RedisLatestCalls.from_url(settings.redis_url)
        warm.latest = latest
        process.on_stop.append(latest.aclose)


def _share_cache_autopilot(process: GatewayProcess, url: str, prompts: PromptCachePort) -> None:
    """The places the cache autopilot learnt and the fan-out gate's leases, shared by the
    gateway processes through Redis (each process alone while it is unreachable)."""
    places = SharedPlaces.from_url(url, prompts.autopilot.learned)
    prompts.shared = places
    gate = process.pipeline.fanout
    leases = gate.shared = SharedLeases.from_url(url, gate.max_wait_s)
    process.on_stop.extend((places.aclose, leases.aclose))


def build_components(
    settings: Settings, *, clock: Callable[[], float] = time.monotonic
) -> GatewayProcess:
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics()
    traces = settings.telemetry
    provider = build_tracer_provider(traces.exporter, traces.otlp_endpoint, traces.service_name)
    telemetry = Telemetry(provider, metrics)
    # http:// upstreams on our own HTTP/1.1 connections (~1/3 of aiohttp's CPU per call, which
    # is ~1/3 of httpx's); https:// on the pool's aiohttp session
    http = Http1Pool(max_connections=1000)
    models, children = build_model_table(settings, http)
    pricing = RoutePricing.from_settings(settings)
    policies = build_policies(settings)
    admission = Admission.from_settings(settings, registry=metrics.registry)
    ledger = build_ledger(settings, admission, metrics)
    prompt = build_prompt_parts(settings, models, metrics, clock)
    fleet = build_fleet(settings, models, pricing, clock, metrics.registry)
    pipeline, warm = build_pipeline(
        models, pricing, admission, prompt, fleet, ledger, telemetry, clock
    )
    views = build_admin_views(settings, policies, ledger.engine)
    process = GatewayProcess(pipeline, policies, models, metrics, views, keep_warm=warm)
    process.readiness_checks.extend(ledger.checks)
    lookup = _add_keyring(process, ledger.engine, timedelta(days=settings.api_keys.retention_days))
    _add_tools(process, settings, lookup, ledger.ledger, admission.store, telemetry, clock)
    _add_shared_state(process, settings, clock)
    if settings.redis_url:
        _share_cache_autopilot(process, settings.redis_url, prompt.prompts)

    async def start() -> None:
        share_the_gil()
        policies.reload_now()
        policies.start()
        ledger.loop.append(asyncio.get_running_loop())
        ledger.recorder.start()  # migrates and seeds spend once the database answers
        # serve once the first try ended: with the database up, budgets are seeded first
        await asyncio.to_thread(ledger.recorder.wait_first_drain, LEDGER_FIRST_TRY_S)
        for child in children:
            await child.start()
        await _start_fleet(process, fleet, prompt.counting, settings.fleet.health_interval_s)

    async def stop() -> None:
        if fleet.sharing is not None:
            await fleet.sharing.stop()
        for child in children:
            await child.stop()
        await admission.aclose()
        await ledger.recorder.aclose()
        policies.stop()
        await http.aclose()
        if fleet.scraper is not None:
            await fleet.scraper.aclose()
        await fleet.cards.aclose()
        telemetry.shutdown()
        ledger.engine.dispose()

    process.on_start.append(start)
    process.on_stop.append(stop)
    return process


def _add_tools(
    process: GatewayProcess,
    settings: Settings,
    lookup: KeyChain,
    ledger: CallLedger,
    quotas: QuotaStore,
    telemetry: Telemetry,
    clock: Callable[[], float],
) -> None:
    """Tool runs (`/v1/tools/runs`) and `/mcp` on one sandbox service; both authenticate as the
    chat doors do: YAML keys, then keys issued over /admin/keys."""
    tools = build_tools(settings, lookup, telemetry, ledger.sink)
    mcp = build_mcp(
        settings, lookup, process.policies, tools.service, ledger, quotas, telemetry, clock
    )
    process.tools_router, process.mcp_door = tools.router, mcp.door
    process.on_start.extend((tools.start, mcp.start))
    process.on_stop.extend((tools.stop, mcp.stop))


async def _start_fleet(
    process: GatewayProcess,
    parts: FleetParts,
    counting: RouteTokenCounting,
    health_interval_s: float,
) -> None:
    """A known fleet state and the engines' tokenizers before serving; then the health checks
    and engine-load polls as tasks, off the request path."""
    fleet = parts.fleet
    await fleet.check_health()
    async with httpx.AsyncClient() as client:  # before serving: the first calls exact
        await counting.tokenizers.fetch_missing(client)
    if counting.tokenizers.num_missing:
        process.tasks.append(asyncio.create_task(fetch_tokenizers(counting.tokenizers)))

    async def health_loop() -> None:
        await asyncio.sleep(health_interval_s)
        await fleet.run_health_checks(health_interval_s)

    process.tasks.append(asyncio.create_task(health_loop()))
    if (warm := process.keep_warm) is not None and process.lookup is not None:
        warm.policy_for = process.lookup.policy_for_key_id  # the key and policy as they are now
        process.tasks.append(asyncio.create_task(warm.run()))  # cache.keep_warm reads
    if parts.scraper is not None:  # engine load, off the request path
        process.tasks.append(asyncio.create_task(fleet.run_signal_polls()))
    if parts.sharing is not None:
        parts.sharing.start()


def _add_keyring(parts: GatewayProcess, engine: Engine, retention: timedelta) -> KeyChain:
    """Issued keys: a snapshot refreshed every second on every process (gateway/apikeys), which
    also prunes those past `retention`; the lookup every door authenticates with (YAML keys
    first)."""

    def utc_now() -> datetime:
        return datetime.now(UTC)

    parts.sessions = session_factory(engine)
    parts.keyring = Keyring(parts.sessions, utc_now, retention=retention)
    lookup = parts.lookup = KeyChain(parts.policies, parts.keyring, utc_now)
    keyring = parts.keyring

    async def start() -> None:
        await asyncio.to_thread(keyring.refresh)
        keyring.start()

    async def stop() -> None:
        await asyncio.to_thread(keyring.stop)

    parts.on_start.append(start)
    parts.on_stop.append(stop)
    return lookup
