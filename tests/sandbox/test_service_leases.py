"""ToolRunService leases: a run whose owner vanished (outcome unknown, on retry and on poll),
a claim never started taken over, a lease kept while waiting to start, a run taken over."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import sqlalchemy as sa

from sandbox.errors import (
    IdempotencyKeyInUse,
    LeaseLost,
    RunNotFound,
)
from sandbox.idempotency import IdempotencyStore
from sandbox.run_slots import LocalRunSlots
from sandbox.service import ToolRunService
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner
from tests.sandbox.service_parts import TOOLS, make_service, tool_request


def test_started_run_whose_owner_vanished_is_outcome_unknown(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    service, store = make_service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, tool_request("key-1"))
    claim = store.claim("acme", "key-1", prepared.fingerprint, "echo", "local")
    store.mark_started(claim.record.id, claim.record.fence, "local")  # then the gateway died

    async def scenario() -> None:
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, tool_request("key-1"))
        clock.advance(11)
        unknown = await service.submit(TOOLS, tool_request("key-1"))
        assert unknown.http_status == 500
        assert json.loads(unknown.body)["error"]["code"] == "tool_run_outcome_unknown"
        again = await service.submit(TOOLS, tool_request("key-1"))
        assert (again.body, again.replayed) == (unknown.body, True)
        assert json.loads((await service.get("acme", claim.record.id)).body)["status"] == (
            "outcome_unknown"
        )

    asyncio.run(scenario())
    assert runner.jobs == []
    assert not store.complete(claim.record.id, claim.record.fence, 200, "late")


def test_claimed_but_never_started_is_taken_over_and_run(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    service, store = make_service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, tool_request("key-1"))
    store.claim("acme", "key-1", prepared.fingerprint, "echo", "local")  # died before starting
    clock.advance(11)
    reply = asyncio.run(service.submit(TOOLS, tool_request("key-1")))
    assert json.loads(reply.body)["status"] == "succeeded"
    assert len(runner.jobs) == 1


def test_the_lease_is_kept_from_the_claim_while_the_run_waits_to_start(
    sqlite_engine: sa.Engine,
) -> None:
    """A claim that waits for its run slot (a shared Redis slot store, a busy host) longer than
    its lease is not taken over by a retry: the lease is renewed from the claim on."""

    class SlowSlots(LocalRunSlots):
        async def acquire(self, tenant: str, token: str, limit: int, ttl_s: float) -> bool:
            await asyncio.sleep(1.0)  # three leases of 0.3 s
            return await super().acquire(tenant, token, limit, ttl_s)

    runner = FakeRunner(ManualClock())
    store = IdempotencyStore(sqlite_engine, time.time, lease_s=0.3, retention_s=3600)
    log = logging.getLogger("t")
    service = ToolRunService(store, runner, time.time, log, slots=SlowSlots())  # type: ignore[arg-type]

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        await asyncio.sleep(0.7)
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, tool_request("key-1"))
        assert (await first).http_status == 200

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_a_run_taken_over_answers_409_and_the_retry_gets_the_winners_result(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    runner.backend_delay_s = 0.5
    service, store = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while (row := store.find("acme", "key-1")) is None:
            await asyncio.sleep(0.01)
        clock.advance(11)  # its lease ran out before it started: another worker takes over
        assert store.take_over(row) is not None
        with pytest.raises(LeaseLost) as lost:
            await first
        assert (lost.value.status_code, lost.value.retry_after_s) == (409, 1)
        assert runner.jobs == []  # it never started
        clock.advance(11)  # the winner died too; the retry takes over and runs it
        reply = await service.submit(TOOLS, tool_request("key-1"))
        assert json.loads(reply.body)["status"] == "succeeded"

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_polling_a_run_whose_gateway_died_ends_in_outcome_unknown(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """A client whose POST was cut off polls GET: once the started run's lease ran out (its
    gateway died; it is never run again) GET records and answers outcome_unknown, as a
    retry of the POST would, instead of `running` forever."""
    runner = FakeRunner(clock)
    service, store = make_service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, tool_request("key-1"))
    claim = store.claim("acme", "key-1", prepared.fingerprint, "echo", "local")
    store.mark_started(claim.record.id, claim.record.fence, "local")  # then the gateway died
    run_id = claim.record.id

    async def scenario() -> None:
        polled = json.loads((await service.get("acme", run_id)).body)
        assert polled["status"] == "running"  # its lease may still be renewed
        clock.advance(11)
        polled = json.loads((await service.get("acme", run_id)).body)
        assert (polled["id"], polled["status"], polled["exit_code"]) == (
            run_id,
            "outcome_unknown",
            None,
        )
        retry = await service.submit(TOOLS, tool_request("key-1"))
        assert (retry.http_status, retry.replayed) == (500, True)
        assert json.loads(retry.body)["error"]["code"] == "tool_run_outcome_unknown"
        with pytest.raises(RunNotFound):
            await service.get("globex", run_id)

    asyncio.run(scenario())
    assert runner.jobs == []
