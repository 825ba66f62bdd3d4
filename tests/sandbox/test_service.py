"""ToolRunService semantics: replay, 422, 409, release, outcome unknown, retention, Redis gate."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from sandbox.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    InvalidToolRequest,
    LeaseLost,
    ResultNotStored,
    RunNotFound,
    SandboxUnavailable,
    ToolNotAllowed,
)
from sandbox.idempotency import IdempotencyStore, create_store_engine, create_tables
from sandbox.run_slots import LocalRunSlots
from sandbox.service import ToolRunService
from sandbox.types import ToolLimits, ToolRunRequest, ToolSpec
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner

TOOLS = (ToolSpec("echo", ("echo", "{word}"), limits=ToolLimits(wall_s=5)),)


def _service(
    sqlite_engine: sa.Engine, clock: ManualClock, runner: FakeRunner, gate: object = None
) -> tuple[ToolRunService, IdempotencyStore]:
    store = IdempotencyStore(sqlite_engine, clock, lease_s=10, retention_s=3600)
    return ToolRunService(store, runner, clock, logging.getLogger("t"), gate=gate), store  # type: ignore[arg-type]


def _req(key: str, word: str = "hi", tenant: str = "acme", tool: str = "echo") -> ToolRunRequest:
    return ToolRunRequest(tenant, "k1", key, tool, (("word", word),))


def test_replay_is_byte_identical_and_runs_once(
    sqlite_engine: sa.Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = FakeRunner(clock, exit_code=3)
    service, _ = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = await service.submit(TOOLS, _req("key-1"))
        clock.advance(5)
        again = await service.submit(TOOLS, _req("key-1"))
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
    service, _ = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        await service.submit(TOOLS, _req("key-1"))
        with pytest.raises(IdempotencyKeyReused):
            await service.submit(TOOLS, _req("key-1", word="bye"))
        other = await service.submit(TOOLS, _req("key-1", tenant="globex"))
        assert other.replayed is False
        with pytest.raises(RunNotFound):
            await service.get("globex", (await service.submit(TOOLS, _req("key-1"))).run_id)

    asyncio.run(scenario())
    assert len(runner.jobs) == 2


def test_while_running_the_same_key_is_409(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)
    runner.release.clear()
    service, _ = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, _req("key-1"))
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
    service, store = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        with pytest.raises(ToolNotAllowed):
            await service.submit(TOOLS, _req("key-1", tool="rm"))
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
            await service.submit(TOOLS, _req("key-1"))
        assert store.find("acme", "key-1") is None
        runner.available = True
        assert (await service.submit(TOOLS, _req("key-1"))).http_status == 200

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_started_run_whose_owner_vanished_is_outcome_unknown(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    service, store = _service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, _req("key-1"))
    claim = store.claim("acme", "key-1", prepared.fingerprint, "echo", "local")
    store.mark_started(claim.record.id, claim.record.fence, "local")  # then the gateway died

    async def scenario() -> None:
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, _req("key-1"))
        clock.advance(11)
        unknown = await service.submit(TOOLS, _req("key-1"))
        assert unknown.http_status == 500
        assert json.loads(unknown.body)["error"]["code"] == "tool_run_outcome_unknown"
        again = await service.submit(TOOLS, _req("key-1"))
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
    service, store = _service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, _req("key-1"))
    store.claim("acme", "key-1", prepared.fingerprint, "echo", "local")  # died before starting
    clock.advance(11)
    reply = asyncio.run(service.submit(TOOLS, _req("key-1")))
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
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
        await asyncio.sleep(0.7)
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, _req("key-1"))
        assert (await first).http_status == 200

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_a_run_taken_over_answers_409_and_the_retry_gets_the_winners_result(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    runner.backend_delay_s = 0.5
    service, store = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
        while (row := store.find("acme", "key-1")) is None:
            await asyncio.sleep(0.01)
        clock.advance(11)  # its lease ran out before it started: another worker takes over
        assert store.take_over(row) is not None
        with pytest.raises(LeaseLost) as lost:
            await first
        assert (lost.value.status_code, lost.value.retry_after_s) == (409, 1)
        assert runner.jobs == []  # it never started
        clock.advance(11)  # the winner died too; the retry takes over and runs it
        reply = await service.submit(TOOLS, _req("key-1"))
        assert json.loads(reply.body)["status"] == "succeeded"

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_after_retention_the_key_runs_again(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)
    service, _ = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        first = await service.submit(TOOLS, _req("key-1"))
        clock.advance(3601)
        second = await service.submit(TOOLS, _req("key-1"))
        assert second.run_id != first.run_id and second.replayed is False

    asyncio.run(scenario())
    assert len(runner.jobs) == 2


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
        service, _ = _service(sqlite_engine, clock, runner, gate)
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        assert await client.exists(f"{redis_prefix}acme:key-1") == 1
        with pytest.raises(IdempotencyKeyInUse):
            await service.submit(TOOLS, _req("key-1"))
        with pytest.raises(IdempotencyKeyReused):
            await service.submit(TOOLS, _req("key-1", word="other"))
        runner.release.set()
        done = await first
        assert await client.exists(f"{redis_prefix}acme:key-1") == 0
        assert (await service.submit(TOOLS, _req("key-1"))).body == done.body
        await client.aclose()

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_a_caller_that_goes_away_does_not_stop_the_run(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    runner = FakeRunner(clock)
    runner.release.clear()
    service, store = _service(sqlite_engine, clock, runner)

    async def scenario() -> None:
        caller = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
        while not runner.jobs:
            await asyncio.sleep(0.01)
        caller.cancel()  # the HTTP client disconnected
        runner.release.set()
        while (row := store.find("acme", "key-1")) is None or row.state != "done":
            await asyncio.sleep(0.01)
        retry = await service.submit(TOOLS, _req("key-1"))
        assert (retry.replayed, json.loads(retry.body)["status"]) == (True, "succeeded")

    asyncio.run(scenario())
    assert len(runner.jobs) == 1


def test_a_fargate_tool_without_a_configured_runner_is_unavailable_and_runs_nothing(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    from tests.sandbox.fargate_parts import make_target

    runner = FakeRunner(clock)
    service, _ = _service(sqlite_engine, clock, runner)
    tools = (ToolSpec("remote", ("echo", "{word}"), runner="fargate", fargate=make_target()),)
    with pytest.raises(SandboxUnavailable) as caught:
        asyncio.run(service.submit(tools, _req("key-f", tool="remote")))
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
        gated, store = _service(sqlite_engine, clock, runner, RedisInflightGate(client))
        try:
            with pytest.raises(SandboxUnavailable) as caught:
                await assembled.submit(TOOLS, _req("key-1"))
            assert (caught.value.status_code, str(caught.value)) == (
                503,
                "tool run slots: Redis unavailable (ConnectionError)",
            )
            assert store.find("acme", "key-1") is None
            first = await gated.submit(TOOLS, _req("key-2"))
            again = await gated.submit(TOOLS, _req("key-2"))
            assert (first.http_status, first.replayed, again.replayed) == (200, False, True)
            assert again.body == first.body
        finally:
            local.close()
            await client.aclose()
            closed.close()

    asyncio.run(scenario())
    assert [job.argv for job in runner.jobs] == [("echo", "hi")]


@pytest.mark.parametrize("run_id", ["abc\x00def", "A" * 32, "f" * 33, "", "../" + "0" * 29])
def test_a_run_id_that_no_run_can_have_is_404_without_asking_the_database(
    engine: sa.Engine, clock: ManualClock, run_id: str
) -> None:
    """Run ids are 32 lowercase hex digits; anything else (a NUL from `%00` in the path, which
    PostgreSQL refuses in any text) is simply no run of the tenant's."""
    service, _ = _service(engine, clock, FakeRunner(clock))
    with pytest.raises(RunNotFound) as caught:
        asyncio.run(service.get("acme", run_id))
    assert (caught.value.status_code, caught.value.code) == (404, "tool_run_not_found")


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
    service, _ = _service(engine, clock, runner)

    async def scenario() -> None:
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
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
        retry = await service.submit(TOOLS, _req("key-1"))
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
        first = asyncio.create_task(service.submit(TOOLS, _req("key-1")))
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
        again = await service.submit(TOOLS, _req("key-1"))
        assert (again.replayed, again.body) == (True, reply.body)

    try:
        asyncio.run(scenario())
    finally:
        engine.dispose()
    assert len(runner.jobs) == 1


def test_polling_a_run_whose_gateway_died_ends_in_outcome_unknown(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """A client whose POST was cut off polls GET: once the started run's lease ran out (its
    gateway died; it is never run again) GET records and answers outcome_unknown, as a
    retry of the POST would, instead of `running` forever."""
    runner = FakeRunner(clock)
    service, store = _service(sqlite_engine, clock, runner)
    prepared = service._prepare(TOOLS, _req("key-1"))
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
        retry = await service.submit(TOOLS, _req("key-1"))
        assert (retry.http_status, retry.replayed) == (500, True)
        assert json.loads(retry.body)["error"]["code"] == "tool_run_outcome_unknown"
        with pytest.raises(RunNotFound):
            await service.get("globex", run_id)

    asyncio.run(scenario())
    assert runner.jobs == []
