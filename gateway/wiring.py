"""Builds every long-lived part of one gateway process from its settings, and starts/stops them.

The only place that knows concrete classes; the pipeline sees ports (gateway/ports.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from adapters.http.http1.pool import Http1Pool
from gateway.apikeys.keyring import KeyChain, Keyring
from gateway.core.admission import Admission
from gateway.core.engine_tokens import EngineTokenizers
from gateway.core.keep_warm import KeepWarm
from gateway.core.keep_warm_latest import RedisLatestCalls
from gateway.core.measure_lane import MeasureLane
from gateway.core.models_table import (
    ModelTableImpl,
    RoutePricing,
    build_model_table,
    fleet_inputs,
    shared_cache_models,
)
from gateway.core.pipeline import Pipeline
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.core.token_count import RouteTokenCounting, TiktokenCounting, route_counting
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.sharing import FleetSharing
from gateway.fleet.signals import HttpMetricsSource
from gateway.fleet.window import ContextWindows, HttpModelCards
from gateway.http.admin_views import JsonView, build_admin_views
from gateway.http.readiness import HealthCheck
from gateway.http.tools_wiring import ToolsRouter, build_tools
from gateway.ledger.call_ledger import CallLedger
from gateway.ledger.db import session_factory
from gateway.ledger_wiring import build_ledger
from gateway.mcp.assembly import build_mcp
from gateway.mcp.door import McpDoor
from gateway.pipeline_wiring import build_pipeline
from gateway.policy_archive import DirectoryArchive
from gateway.replay.assembly import build_replay
from gateway.replay.service import ReplayService
from gateway.responses.redis_store import RedisResponseStore
from gateway.responses.store import MemoryResponseStore, ResponseStore
from gateway.settings import Settings
from gateway.telemetry import Metrics, Telemetry, build_tracer_provider
from policies.last_good import KnownNames
from policies.store import PolicyStore
from quotas.store import QuotaStore

log = logging.getLogger("lantern.wiring")
LEDGER_FIRST_TRY_S = 30.0


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


async def fetch_tokenizers(tokenizers: EngineTokenizers, retry_s: float = 2.0) -> None:
    """Each self-hosted replica's tokenizer, once; until then its calls are reserved at an
    upper bound (gateway/core/token_count.py)."""
    async with httpx.AsyncClient() as client:
        while tokenizers.num_missing:
            await tokenizers.fetch_missing(client)
            if tokenizers.num_missing:
                await asyncio.sleep(retry_s)


def build_response_store(settings: Settings, clock: Callable[[], float]) -> ResponseStore:
    """Where `/v1/responses` keeps responses: Redis when configured (every process sees them)."""
    ttl_s = settings.responses.ttl_s
    max_entries = settings.responses.max_entries
    if settings.redis_url:  # per tenant there; in all, fairly shared, in this process
        return RedisResponseStore.from_url(settings.redis_url, ttl_s, max_entries)
    return MemoryResponseStore(ttl_s, max_entries, clock)


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


@dataclass
class PromptParts:
    """Token counting and the prompt cache, on the loop and in the large-call lane's thread."""

    counting: RouteTokenCounting
    prompts: PromptCachePort
    lane: MeasureLane


def build_prompt_parts(
    settings: Settings, models: ModelTableImpl, metrics: Metrics, clock: Callable[[], float]
) -> PromptParts:
    tiktoken = TiktokenCounting()  # one memo of token ids for counting and prefix hashing
    for model in settings.models:  # load the BPE tables now, not in the first call (~0.4 s)
        tiktoken.counter.encoding(model.name)
    counting = route_counting(settings, models.routes(), tiktoken)
    prompts = PromptCachePort(
        settings.resolve_server_secret(),
        registry=metrics.registry,
        clock=clock,
        encoder=TiktokenEncoder(counter=counting.counter),
        shared_cache_models=shared_cache_models(settings),
    )
    # the large-call lane's own tiktoken memos (used from a thread); engine tokenizers shared;
    # its tables loaded now too, not in the first large call (and counted in the start-up RSS)
    lane_tiktoken = TiktokenCounting()
    for model in settings.models:
        lane_tiktoken.counter.encoding(model.name)
    lane_counting = counting.with_base(lane_tiktoken)
    lane = MeasureLane(
        PromptCachePort(
            settings.resolve_server_secret(),
            clock=clock,
            encoder=TiktokenEncoder(counter=lane_counting.counter),
            shared_cache_models=shared_cache_models(settings),
        ),
        lane_counting,
        settings.http.offload_body_bytes,
    )
    return PromptParts(counting, prompts, lane)


@dataclass
class FleetParts:
    """The fleet and the HTTP clients that read its replicas' load and model cards."""

    fleet: Fleet
    scraper: HttpMetricsSource | None
    cards: HttpModelCards
    sharing: FleetSharing | None = None  # affinity and prefix index shared through Redis


def build_fleet(
    settings: Settings,
    models: ModelTableImpl,
    pricing: RoutePricing,
    clock: Callable[[], float],
    registry: CollectorRegistry,
) -> FleetParts:
    prices, replica_specs = fleet_inputs(settings, pricing)
    fs = settings.fleet
    scraper = (
        HttpMetricsSource(clock, timeout_s=fs.signal_timeout_s) if fs.signal_interval_s else None
    )
    cards = HttpModelCards()  # context windows, read with the start-up health check
    windows = {b.name: b.max_model_len for m in settings.models for b in m.backends}
    config = FleetConfig(
        signal_interval_s=fs.signal_interval_s,
        signal_max_age_s=fs.signal_max_age_s,
        signal_timeout_s=fs.signal_timeout_s,
        paid_probe_interval_s=fs.paid_probe_interval_s,
    )
    fleet = Fleet(
        models.routes(),
        config,
        clock=clock,
        rng=random.Random(),
        prices=prices,
        specs=replica_specs,
        metrics=scraper,
        windows=ContextWindows(windows, cards),
    )
    sharing = _sharing(settings, fleet, clock, registry)
    if sharing is not None:
        fleet.share(sharing)
    return FleetParts(fleet, scraper, cards, sharing)


def _sharing(
    settings: Settings, fleet: Fleet, clock: Callable[[], float], registry: CollectorRegistry
) -> FleetSharing | None:
    """Session affinity and the prefix index shared across processes, when Redis is set."""
    if settings.redis_url is None:
        return None
    return FleetSharing.from_url(
        settings.redis_url,
        sessions=fleet.registry.sessions,
        index=lambda: fleet.index,
        clock=clock,
        key_prefix=settings.fleet.shared_key_prefix,
        session_ttl_s=settings.fleet.shared_session_ttl_s,
        slot_lease_s=settings.fleet.shared_slot_lease_s,
        registry=registry,
    )


def build_policies(settings: Settings) -> PolicyStore:
    """Tenant policies, checked against the configured model and backend names, with the last
    good one of each file kept on disk across restarts."""
    return PolicyStore(
        settings.policy_dir,
        poll_interval_s=settings.policy_poll_interval_s,
        known=KnownNames(
            {m.name for m in settings.models}, {b.name for m in settings.models for b in m.backends}
        ),
        archive=DirectoryArchive(settings.var_dir / "policy-last-good"),
    )


def build_components(
    settings: Settings, *, clock: Callable[[], float] = time.monotonic
) -> GatewayProcess:
    settings.var_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics()
    telemetry = Telemetry(
        build_tracer_provider(settings.telemetry.exporter, settings.telemetry.otlp_endpoint),
        metrics,
    )
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
    lookup = _add_keyring(process, ledger.engine)
    _add_tools(process, settings, lookup, ledger.ledger, admission.store, clock)
    _add_shared_state(process, settings, clock)

    async def start() -> None:
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
    clock: Callable[[], float],
) -> None:
    """Tool runs (`/v1/tools/runs`) and `/mcp` on one sandbox service; both authenticate as the
    chat doors do: YAML keys, then keys issued over /admin/keys."""
    tools = build_tools(settings, lookup)
    mcp = build_mcp(settings, lookup, process.policies, tools.service, ledger, quotas, clock)
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


def _add_keyring(parts: GatewayProcess, engine: Engine) -> KeyChain:
    """Issued keys: a snapshot refreshed every second on every process (gateway/apikeys); the
    lookup every door authenticates with (YAML keys first)."""

    def utc_now() -> datetime:
        return datetime.now(UTC)

    parts.sessions = session_factory(engine)
    parts.keyring = Keyring(parts.sessions, utc_now)
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
