"""Builds the tool-run service (sandbox/) and its routes for one gateway process.

The idempotency table lives in its own SQLite file beside a SQLite ledger (never in the
ledger's file), else in the gateway's database (`Settings.tool_store_url`); Redis (when configured) adds a
cross-process in-flight gate; Fargate clients exist only when a region is configured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from gateway.http.auth import KeyLookup, authenticate
from gateway.http.request_body import BodyLimits
from gateway.http.tools_routes import build_tools_router
from gateway.ledger.call_ledger import LineSink
from gateway.ledger.tool_runs import RunnerPrice, ToolRunLedger
from gateway.settings import Settings, ToolRunPriceSettings
from gateway.telemetry import Telemetry
from policies.model import TenantPolicy
from sandbox.assembly import build_tool_run_service
from sandbox.idempotency import create_store_engine
from sandbox.service import ToolRunService

log = logging.getLogger("lantern.sandbox")


ToolsRouter = APIRouter


@dataclass(frozen=True, slots=True)
class ToolsPart:
    router: ToolsRouter
    start: Callable[[], Awaitable[None]]
    stop: Callable[[], Awaitable[None]]
    service: ToolRunService  # also serves the MCP door's sandboxed tools


def build_tools(
    settings: Settings,
    keys: KeyLookup,
    telemetry: Telemetry | None = None,
    ledger: LineSink | None = None,
) -> ToolsPart:
    """With `ledger` (the usage recorder), every tool run that ran writes its row there."""
    cfg = settings.sandbox
    engine = create_store_engine(settings.tool_store_url())
    redis_client = None
    if settings.redis_url:
        import redis.asyncio as redis

        redis_client = redis.from_url(settings.redis_url, socket_timeout=5.0)
    ecs, logs = _fargate_clients(cfg.fargate_region)
    service, runner = build_tool_run_service(
        engine,
        log,
        backend=cfg.backend,
        lease_s=cfg.lease_s,
        retention_s=cfg.retention_s,
        egress_allow_cidrs=cfg.egress_allow_cidrs,
        cgroup_root=cfg.cgroup_root,
        redis_client=redis_client,
        ecs_client=ecs,
        logs_client=logs,
        meter=None if ledger is None else tool_run_ledger(ledger, cfg.prices),
    )

    async def caller(request: Request) -> tuple[TenantPolicy, str]:
        found = authenticate(request.headers, keys)
        return found.tenant, found.key_id

    sweeper: list[asyncio.Task[None]] = []

    async def sweep_forever() -> None:
        while True:
            await asyncio.sleep(cfg.sweep_interval_s)
            try:
                removed = await service.sweep()
                if removed:
                    log.info("tool runs: %d expired results removed", removed)
            except Exception:  # the next sweep retries; never kill the loop
                log.exception("tool runs: sweep failed")

    async def start() -> None:
        sweeper.append(asyncio.create_task(sweep_forever()))

    async def stop() -> None:
        for task in sweeper:
            task.cancel()
        runner.close()
        if redis_client is not None:
            await redis_client.aclose()
        engine.dispose()

    limits = BodyLimits.from_settings(settings.http)
    router = build_tools_router(service, caller, limits, telemetry)
    return ToolsPart(router, start, stop, service)


def _fargate_clients(region: str | None) -> tuple[Any, Any]:
    """boto3's ECS and CloudWatch Logs clients for `region`; (None, None): no Fargate."""
    if not region:
        return None, None
    import boto3

    return boto3.client("ecs", region_name=region), boto3.client("logs", region_name=region)


def tool_run_ledger(
    sink: LineSink,
    prices: ToolRunPriceSettings,
    now: Callable[[], datetime] = partial(datetime.now, UTC),
) -> ToolRunLedger:
    """The runs' meter over the usage recorder, at the configured price of each runner."""
    by_runner = {
        name: RunnerPrice(price.vcpu_hour_usd, price.gb_hour_usd, price.min_billed_s)
        for name, price in (("local", prices.local), ("fargate", prices.fargate))
    }
    return ToolRunLedger(sink, now, by_runner)
