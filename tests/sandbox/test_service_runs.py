"""ToolRunService runs and replays: byte-identical replay, 422 on a reused key, 409 while
running, validation that stores nothing, retention, a caller that goes away, unknown run ids."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import sqlalchemy as sa

from sandbox.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    InvalidToolRequest,
    RunNotFound,
    SandboxUnavailable,
    ToolNotAllowed,
)
from sandbox.types import ToolLimits, ToolRunRequest
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner
from tests.sandbox.service_parts import TOOLS, make_service, tool_request


def test_replay_is_byte_identical_and_runs_once(
    sqlite_engine: sa.Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = FakeRunner(clock, exit_code=3)
    service, _ = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = await service.submit(TOOLS, tool_request("key-1"))
        clock.advance(5)
        again = await service.submit(TOOLS, tool_request("key-1"))
        assert (first.http_status, first.replayed, again.replayed) == (200, False, True)
        assert again.body == first.body and again.run_id == first.run_id
        body = json.loads(first.body)
        assert (body["status"], body["exit_code"], body["stdout"], body["duration_ms"]) == (
            "failed",
            3,
            "hi\n",
            250,
        )
        assert (await service.get("acme", first.run_id)).body == first.body

    with caplog.at_level(logging.INFO, logger="t"):
        asyncio.run(scenario())
    assert [job.argv for job in runner.jobs] == [("echo", "hi")]
    assert runner.jobs[0].env[0][0] == "LANTERN_IDEMPOTENCY_KEY"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tool run")]
    run_id = line.split()[2].removeprefix("id=")
    assert line == (
        f"tool run id={run_id} tenant=acme tool=echo runner=local status=failed exit_code=3 "
        "duration_ms=250"
    )  # what ran, once; never its arguments or output


def test_same_key_other_request_is_422_and_other_tenant_is_separate(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    service, _ = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        await service.submit(TOOLS, tool_request("key-1"))
        with pytest.raises(IdempotencyKeyReused):
            await service.submit(TOOLS, tool_request("key-1", word="bye"))
        other = await service.submit(TOOLS, tool_request("key-1", tenant="globex"))
        assert other.replayed is False
        with pytest.raises(RunNotFound):
            await service.get("globex", (await service.submit(TOOLS, tool_request("key-1"))).run_id)

    asyncio.run(scenario())
    assert len(runner.jobs) == 2


def test_while_running_the_same_key_is_409(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)
    runner.release.clear()
    service, _ = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, tool_request("key-1"))
        row = service._store.find("acme", "key-1")
        assert row is not None
        running = json.loads((await service.get("acme", row.id)).body)
        assert running["status"] == "running"
        runner.release.set()
        assert (await first).http_status == 200

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_validation_failures_are_not_stored(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)
    service, store = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        with pytest.raises(ToolNotAllowed):
            await service.submit(TOOLS, tool_request("key-1", tool="rm"))
        bad = ToolRunRequest("acme", "k1", "key-1", "echo", (("wrong", "x"),))
        with pytest.raises(InvalidToolRequest):
            await service.submit(TOOLS, bad)
        too_big = ToolRunRequest(
            "acme", "k1", "key-1", "echo", (("word", "x"),), ToolLimits(wall_s=99)
        )
        with pytest.raises(InvalidToolRequest):
            await service.submit(TOOLS, too_big)
        runner.available = False
        with pytest.raises(SandboxUnavailable):
            await service.submit(TOOLS, tool_request("key-1"))
        assert store.find("acme", "key-1") is None
        runner.available = True
        assert (await service.submit(TOOLS, tool_request("key-1"))).http_status == 200

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_after_retention_the_key_runs_again(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)
    service, _ = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = await service.submit(TOOLS, tool_request("key-1"))
        clock.advance(3601)
        second = await service.submit(TOOLS, tool_request("key-1"))
        assert second.run_id != first.run_id and second.replayed is False

    asyncio.run(scenario())
    assert len(runner.jobs) == 2


def test_a_caller_that_goes_away_does_not_stop_the_run(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    runner.release.clear()
    service, store = make_service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        caller = asyncio.create_task(service.submit(TOOLS, tool_request("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        caller.cancel()  # the HTTP client disconnected
        runner.release.set()
        while (row := store.find("acme", "key-1")) is None or row.state != "done":
            await asyncio.sleep(0.01)
        retry = await service.submit(TOOLS, tool_request("key-1"))
        assert (retry.replayed, json.loads(retry.body)["status"]) == (True, "succeeded")

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


@pytest.mark.parametrize("run_id", ["abc\x00def", "A" * 32, "f" * 33, "", "../" + "0" * 29])
def test_a_run_id_that_no_run_can_have_is_404_without_asking_the_database(
    engine: sa.Engine, clock: ManualClock, run_id: str
) -> None:
    """Run ids are 32 lowercase hex digits; anything else (a NUL from `%00` in the path, which
    PostgreSQL refuses in any text) is simply no run of the tenant's."""
    service, _ = make_service(engine, clock, FakeRunner(clock))
    with pytest.raises(RunNotFound) as caught:
        asyncio.run(service.get("acme", run_id))
    assert (caught.value.status_code, caught.value.code) == (404, "tool_run_not_found")
