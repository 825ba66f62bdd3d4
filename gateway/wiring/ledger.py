"""Builds the usage ledger of one gateway process: its database engine, the writer thread that
batches rows into it, the call ledger the pipeline writes through, and /ready's file check."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from sqlalchemy.engine import Engine

from gateway.core.admission import Admission
from gateway.http.readiness import HealthCheck
from gateway.ledger.call_ledger import CallLedger
from gateway.ledger.db import create_ledger_engine, migrate_engine
from gateway.ledger.metrics import LedgerFileCollector, RecorderCollector
from gateway.ledger.recorder import RecorderConfig, UsageRecorder
from gateway.ledger.sqlite_file import LedgerFileWatch
from gateway.settings import Settings
from gateway.telemetry import Metrics

# The ledger writer gathers rows this long once woken: one insert costs ~1 ms of CPU whatever
# its size, so at 25 calls/s a 50 ms linger paid it for nearly every row (0.3-0.5 ms a call);
# rows reach the database at most this much later (reports and tests poll; close() drains at
# once). After a second's idle the writer's code and SQLite's pages are cold: a batch costs
# 1.5-3 ms of CPU whatever its size on the 2-vCPU hosts, so under 25 calls/s the writer thread
# cost 0.13-0.21 ms a call with 0.5 s and 0.09-0.12 with 1 s (two processes served side by side).
LEDGER_LINGER_S = 1.0
LEDGER_SEED_TIMEOUT_S = 60.0


@dataclass
class LedgerParts:
    """The usage ledger: the database engine, its writer thread and the pipeline's port."""

    engine: Engine
    recorder: UsageRecorder
    ledger: CallLedger
    loop: list[asyncio.AbstractEventLoop]  # the serving loop, known once started
    checks: list[HealthCheck]  # for /ready: a SQLite ledger's file still the one written


def build_ledger(settings: Settings, admission: Admission, metrics: Metrics) -> LedgerParts:
    engine = create_ledger_engine(settings.database_url)
    loop: list[asyncio.AbstractEventLoop] = []
    recorder = UsageRecorder(
        engine,
        RecorderConfig(spool_dir=settings.var_dir / "spool", linger_s=LEDGER_LINGER_S),
        prepare=lambda db: prepare_ledger(db, admission, loop),
    )
    metrics.registry.register(RecorderCollector(recorder))
    watch = LedgerFileWatch.of(engine)
    checks: list[HealthCheck] = []
    if watch is not None:
        metrics.registry.register(LedgerFileCollector(watch))
        checks.append(watch.problems)
    ledger = CallLedger(recorder, partial(datetime.now, UTC))  # no Python frame per call
    return LedgerParts(engine, recorder, ledger, loop, checks)


def prepare_ledger(
    engine: Engine, admission: Admission, loop: list[asyncio.AbstractEventLoop]
) -> None:
    """Runs in the ledger writer thread until it succeeds, so the gateway starts and serves
    while the database is down: the migrations, then this month's spend per tenant seeded
    into the quota store (seeding never lowers a spend, so late seeding is safe)."""
    migrate_engine(engine)
    seeded = asyncio.run_coroutine_threadsafe(admission.start(engine), loop[0])
    seeded.result(timeout=LEDGER_SEED_TIMEOUT_S)
