"""ToolRunService around what it leans on: the Redis in-flight gate, Redis or the database
going away mid-run, and a Fargate tool with no runner configured."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
import sqlalchemy as sa

from sandbox.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    ResultNotStored,
    SandboxUnavailable,
)
from sandbox.idempotency import IdempotencyStore, create_store_engine, create_tables
from sandbox.service import ToolRunService
from sandbox.types import ToolSpec
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner
from tests.sandbox.service_parts import TOOLS, make_service, tool_request


@pytest.mark.redis
def test_redis_gate_answers_duplicates_without_running(
    sqlite_engine: sa.Engine, clock: ManualClock, redis_url: str, redis_prefix: str
) -> None:
    import redis.asyncio as aioredis

    from sandbox.inflight import RedisInflightGate

    runner = FakeRunner(clock)
    runner.release.clear()

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        gate = RedisInflightGate(client, prefix=redis_prefix)
        service, _ = make_service(sqlite_engine, clock, runner, gate)
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        assert await client.exists(f"{redis_prefix}acme:key-1") == 1
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, tool_request("key-1"))
        with pytest.raises(IdempotencyKeyReused):
            await service.submit(TOOLS, tool_request("key-1", word="other"))
        runner.release.set()
        done = await first
        assert await client.exists(f"{redis_prefix}acme:key-1") == 0
        assert (await service.submit(TOOLS, tool_request("key-1"))).body == done.body
        await client.aclose()

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_a_fargate_tool_without_a_configured_runner_is_unavailable_and_runs_nothing(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    from tests.sandbox.fargate_parts import make_target

    runner = FakeRunner(clock)
    service, _ = make_service(sqlite_engine, clock, runner)
    tools = (ToolSpec("remote", ("echo", "{word}"), runner="fargate", fargate=make_target()),)
    with pytest.raises(SandboxUnavailable) as caught:
        asyncio.run(service.submit(tools, tool_request("key-f", tool="remote")))
    assert caught.value.status_code == 503
    assert runner.jobs == []


def test_a_redis_that_does_not_answer_refuses_with_503_and_replays_still_come_from_the_store(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """The in-flight gate is advisory: Redis down, it stands aside and the store decides. The
    assembled service (gate and slots on the one Redis) refuses a new run with 503, key free;
    a run stored earlier is still replayed."""
    import socket

    import redis.asyncio as aioredis

    from sandbox.assembly import build_tool_run_service
    from sandbox.inflight import RedisInflightGate

    runner = FakeRunner(clock)

    async def scenario() -> None:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        client = aioredis.from_url(f"redis://127.0.0.1:{closed.getsockname()[1]}")
        assembled, local = build_tool_run_service(
            sqlite_engine, logging.getLogger("t"), redis_client=client, clock=clock
        )
        gated, store = make_service(sqlite_engine, clock, runner, RedisInflightGate(client))
        try:
            with pytest.raises(SandboxUnavailable) as caught:
                await assembled.submit(TOOLS, tool_request("key-1"))
            assert (caught.value.status_code, str(caught.value)) == (
                503,
                "tool run slots: Redis unavailable (ConnectionError)",
            )
            assert store.find("acme", "key-1") is None
            first = await gated.submit(TOOLS, tool_request("key-2"))
            again = await gated.submit(TOOLS, tool_request("key-2"))
            assert (first.http_status, first.replayed, again.replayed) == (200, False, True)
            assert again.body == first.body
        finally:
            local.close()
            await client.aclose()
            closed.close()

    asyncio.run(scenario())
    assert [job.argv for job in runner.jobs] == [("echo", "hi")]


def test_a_result_the_store_cannot_take_is_not_reported_as_nothing_ran(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The database goes away while the tool runs: the caller must not hear "nothing ran"
    (a client would then run it again under a new key); it is told to retry the same key,
    and that retry, once the database is back, learns the outcome is unknown."""
    folder = tmp_path / "db"
    engine = create_store_engine(f"sqlite:///{folder / 'runs.db'}")
    create_tables(engine)
    runner = FakeRunner(clock)
    runner.release.clear()
    service, _ = make_service(engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        engine.dispose()
        folder.rename(tmp_path / "away")
        folder.write_text("")  # a file where the database's folder was: it cannot be opened
        runner.release.set()
        with pytest.raises(ResultNotStored) as caught:
            await first
        error = caught.value
        assert (error.status_code, error.code, error.retry_after_s) == (
            503,
            "tool_run_result_not_stored",
            1,
        )
        assert str(error).startswith("the tool run started, but the tool-run store is unreachable")
        folder.unlink()
        (tmp_path / "away").rename(folder)
        clock.advance(11)  # past the lease
        retry = await service.submit(TOOLS, tool_request("key-1"))
        assert (retry.http_status, json.loads(retry.body)["error"]["code"]) == (
            500,
            "tool_run_outcome_unknown",
        )

    try:
        asyncio.run(scenario())
    finally:
        engine.dispose()
    assert len(runner.jobs) == 1


def test_a_database_blip_while_a_tool_runs_neither_stops_the_lease_nor_loses_the_result(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The database cannot be opened for a few lease renewals mid-run: renewing goes on once
    it is back, and the run's result is stored and answered as usual."""
    folder = tmp_path / "db"
    engine = create_store_engine(f"sqlite:///{folder / 'runs.db'}")
    create_tables(engine)
    runner = FakeRunner(clock)
    runner.release.clear()
    store = IdempotencyStore(engine, clock, lease_s=0.3, retention_s=3600)
    service = ToolRunService(store, runner, clock, logging.getLogger("t"))  # type: ignore[arg-type]

    async def renewed() -> None:  # the row's lease follows the clock again
        while (row := store.find("acme", "key-1")) is None or (
            row.lease_expires_at != clock.now + 0.3
        ):
            await asyncio.sleep(0.05)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        engine.dispose()
        folder.rename(tmp_path / "away")
        folder.write_text("")  # a file where the database's folder was: it cannot be opened
        await asyncio.sleep(0.5)  # several renewals (every 0.1 s) fail
        folder.unlink()
        (tmp_path / "away").rename(folder)
        clock.advance(5)
        await asyncio.wait_for(renewed(), 10)
        runner.release.set()
        reply = await first
        assert (reply.http_status, json.loads(reply.body)["status"]) == (200, "succeeded")
        again = await service.submit(TOOLS, tool_request("key-1"))
        assert (again.replayed, again.body) == (True, reply.body)

    try:
        asyncio.run(scenario())
    finally:
        engine.dispose()
    assert len(runner.jobs) == 1
