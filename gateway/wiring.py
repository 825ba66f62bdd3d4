"""Builds every long-lived part of one gateway process from its settings, and starts/stops them.

The only place that knows concrete classes; the pipeline sees ports (gateway/core/ports.py).
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
from sqlalchemy.engine import Engine

from adapters.backends.http1_connection import Http1Pool
from gateway.core.admission import Admission
from gateway.core.engine_tokens import EngineTokenizers
from gateway.core.measure_lane import MeasureLane
from gateway.core.models_table import (
    ModelTableImpl,
    RoutePricing,
    build_model_table,
    fleet_inputs,
    shared_cache_models,
)
from gateway.core.pipeline import Pipeline, Services
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder
from gateway.core.token_count import TiktokenCounting, route_counting
from gateway.fleet.routing_port import Fleet
from gateway.fleet.sharing import FleetSharing
from gateway.fleet.signals import HttpMetricsSource
from gateway.fleet.window import ContextWindows, HttpModelCards
from gateway.http.admin_views import JsonView, build_admin_views
from gateway.http.tools_wiring import ToolsRouter, build_tools
from gateway.ledger.call_ledger import CallLedger
from gateway.ledger.db import create_ledger_engine, migrate_engine
from gateway.ledger.metrics import RecorderCollector
from gateway.ledger.recorder import RecorderConfig, UsageRecorder
from gateway.settings import Settings
from gateway.telemetry import Metrics, Telemetry, build_tracer_provider
from policies.store import PolicyStore

log = logging.getLogger("lantern.wiring")
# The ledger writer gathers rows this long once woken: one insert costs ~1 ms of CPU whatever
# its size, so at 25 calls/s a 50 ms linger paid it for nearly every row (0.3-0.5 ms a call);
# rows reach the database at most this much later (reports and tests poll; close() drains).
# 0.5 s: an insert of a few rows still costs ~0.5 ms of cold CPU on the 2-vCPU hosts, so five
# batches a second were ~0.1 ms per call at 25 calls/s; two are ~0.04.
LEDGER_LINGER_S = 0.5
LEDGER_SEED_TIMEOUT_S = 60.0
LEDGER_FIRST_TRY_S = 30.0


@dataclass
class Components:
    pipeline: Pipeline
    keys: PolicyStore
    models: ModelTableImpl
    metrics: Metrics
    admin_views: dict[str, JsonView]
    tools_router: ToolsRouter | None = None
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


def build_components(
    settings: Settings, *, clock: Callable[[], float] = time.monotonic
) -> Components:
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
    keys = PolicyStore(settings.policy_dir, poll_interval_s=settings.policy_poll_interval_s)

    engine = create_ledger_engine(settings.database_url)
    loop: list[asyncio.AbstractEventLoop] = []  # the serving loop, known once started
    admission = Admission.from_settings(settings, registry=metrics.registry)
    recorder = UsageRecorder(
        engine,
        RecorderConfig(spool_dir=settings.var_dir / "spool", linger_s=LEDGER_LINGER_S),
        prepare=lambda db: _prepare_ledger(db, admission, loop),
    )
    metrics.registry.register(RecorderCollector(recorder))
    ledger = CallLedger(recorder, lambda: datetime.now(UTC))
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
    # the large-call lane's own tiktoken memos (used from a thread); engine tokenizers shared
    lane_counting = counting.with_base(TiktokenCounting())
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
    prices, replica_specs = fleet_inputs(settings, pricing)
    fs = settings.fleet
    scraper = (
        HttpMetricsSource(clock, timeout_s=fs.signal_timeout_s) if fs.signal_interval_s else None
    )
    cards = HttpModelCards()  # context windows, read with the start-up health check
    windows = {b.name: b.max_model_len for m in settings.models for b in m.backends}
    fleet = Fleet(
        models.routes(),
        prices=prices,
        specs=replica_specs,
        clock=clock,
        rng=random.Random(),
        metrics=scraper,
        signal_interval_s=fs.signal_interval_s,
        signal_max_age_s=fs.signal_max_age_s,
        signal_timeout_s=fs.signal_timeout_s,
        index_lone_replicas=False,  # a replica alone in its routes: nothing to choose
        windows=ContextWindows(windows, cards),
    )
    sharing = None
    if settings.redis_url is not None:  # affinity and prefix index shared across processes
        sharing = FleetSharing.from_url(
            settings.redis_url,
            sessions=fleet.registry.sessions,
            index=lambda: fleet.index,
            clock=clock,
            key_prefix=fs.shared_key_prefix,
            session_ttl_s=fs.shared_session_ttl_s,
            registry=metrics.registry,
        )
        fleet.share(sharing)

    pipeline = Pipeline(
        Services(
            models=models,
            counter=counting,
            pricing=pricing,
            admission=admission,
            prompts=prompts,
            routing=fleet,
            ledger=ledger,
            telemetry=telemetry,
            clock=clock,
            measure_lane=lane,
        )
    )
    tools = build_tools(settings, keys)
    parts = Components(
        pipeline, keys, models, metrics, build_admin_views(settings, keys, engine), tools.router
    )
    parts.on_start.append(tools.start)
    parts.on_stop.append(tools.stop)

    async def start() -> None:
        keys.reload_now()
        keys.start()
        loop.append(asyncio.get_running_loop())
        recorder.start()  # migrates and seeds spend once the database answers
        # serve once the first try ended: with the database up, budgets are seeded first
        await asyncio.to_thread(recorder.wait_first_drain, LEDGER_FIRST_TRY_S)
        for child in children:
            await child.start()
        await fleet.check_health()  # start serving with a known fleet state
        async with httpx.AsyncClient() as client:  # before serving: the first calls exact
            await counting.tokenizers.fetch_missing(client)
        if counting.tokenizers.num_missing:
            parts.tasks.append(asyncio.create_task(fetch_tokenizers(counting.tokenizers)))

        async def health_loop(interval_s: float) -> None:
            await asyncio.sleep(interval_s)
            await fleet.run_health_checks(interval_s)

        parts.tasks.append(asyncio.create_task(health_loop(fs.health_interval_s)))
        if scraper is not None:  # engine load, off the request path
            parts.tasks.append(asyncio.create_task(fleet.run_signal_polls()))
        if sharing is not None:
            sharing.start()

    async def stop() -> None:
        if sharing is not None:
            await sharing.stop()
        for child in children:
            await child.stop()
        await admission.aclose()
        await recorder.aclose()
        keys.stop()
        await http.aclose()
        if scraper is not None:
            await scraper.aclose()
        await cards.aclose()
        telemetry.shutdown()
        engine.dispose()

    parts.on_start.append(start)
    parts.on_stop.append(stop)
    return parts


def _prepare_ledger(
    engine: Engine, admission: Admission, loop: list[asyncio.AbstractEventLoop]
) -> None:
    """Runs in the ledger writer thread until it succeeds, so the gateway starts and serves
    while the database is down: the migrations, then this month's spend per tenant seeded
    into the quota store (seeding never lowers a spend, so late seeding is safe)."""
    migrate_engine(engine)
    seeded = asyncio.run_coroutine_threadsafe(admission.start(engine), loop[0])
    seeded.result(timeout=LEDGER_SEED_TIMEOUT_S)
