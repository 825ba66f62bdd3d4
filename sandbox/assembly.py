"""Assembles a ToolRunService from plain settings values (the gateway's one call at start-up).

Creates the idempotency table if missing (on first use when the database is down at start-up);
builds nothing at import time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from sandbox.addresses import parse_cidrs
from sandbox.fargate import FargateRunner
from sandbox.idempotency import IdempotencyStore, create_tables
from sandbox.inflight import RedisInflightGate, RedisRunSlots
from sandbox.local_runner import LocalRunner
from sandbox.metering import RunMeter
from sandbox.service import ToolRunService


def build_tool_run_service(
    engine: sa.Engine,
    logger: logging.Logger,
    *,
    backend: str = "auto",
    lease_s: float = 30.0,
    retention_s: float = 24 * 3600.0,
    egress_allow_cidrs: tuple[str, ...] = (),
    cgroup_root: str = "auto",
    redis_client: Any = None,
    ecs_client: Any = None,
    logs_client: Any = None,
    clock: Callable[[], float] = time.time,
    meter: RunMeter | None = None,
) -> tuple[ToolRunService, LocalRunner]:
    """The service, plus its LocalRunner (call `.close()` on it at shutdown). Fargate runs
    are enabled when both boto3 clients are given; with a Redis client, the in-flight gate and
    the tenants' run slots are shared among gateway processes (else counted per process);
    with a `meter`, each run that ran is metered (the gateway's ledger bills it)."""
    try:
        create_tables(engine)
    except sa.exc.OperationalError:  # the database is down: the store creates it on first use
        logger.warning("tool runs: database unreachable at start-up; runs answer 503 until back")
    store = IdempotencyStore(engine, clock, lease_s=lease_s, retention_s=retention_s)
    local = LocalRunner(
        logger,
        allow_cidrs=parse_cidrs(egress_allow_cidrs),
        backend=backend,
        clock=clock,
        cgroup_root=cgroup_root,
    )
    fargate = None
    if ecs_client is not None and logs_client is not None:
        fargate = FargateRunner(ecs_client, logs_client, clock, logger)
    gate = slots = None
    if redis_client is not None:
        gate, slots = RedisInflightGate(redis_client), RedisRunSlots(redis_client)
    service = ToolRunService(
        store, local, clock, logger, fargate=fargate, gate=gate, slots=slots, meter=meter
    )
    return service, local
