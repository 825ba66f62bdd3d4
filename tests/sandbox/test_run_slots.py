"""A tenant's cap on concurrent tool runs: real boxes held open on a real origin, the slot given
back on success, failure, timeout and a caller that went away; the Redis slots shared."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa

from sandbox.addresses import parse_cidrs
from sandbox.errors import RunnerFailed, SandboxUnavailable, TooManyRuns
from sandbox.idempotency import IdempotencyStore
from sandbox.inflight import RedisRunSlots
from sandbox.local_runner import LocalRunner
from sandbox.run_slots import LocalRunSlots
from sandbox.service import ToolRunService
from sandbox.types import ToolLimits, ToolRunReply, ToolRunRequest, ToolSpec
from tests.sandbox.origin import MapResolver

HOLD = (
    "import sys, urllib.request\n"
    "urllib.request.urlopen('http://hold.test:' + sys.argv[1] + '/', timeout=60).read()\n"
    "sys.exit(int(sys.argv[2]))\n"
)
LIMITS = ToolLimits(wall_s=60, memory_mb=256, cpu_s=10, output_kb=4)


class HoldingOrigin:
    """Answers each request only once `release` is set; counts arrivals."""

    def __init__(self) -> None:
        self.arrived = 0
        self.release = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.arrived += 1
        await self.release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()


@asynccontextmanager
async def _holding_origin() -> AsyncIterator[tuple[HoldingOrigin, int]]:
    origin = HoldingOrigin()
    server = await asyncio.start_server(origin.serve, "127.0.0.2", 0)
    try:
        yield origin, server.sockets[0].getsockname()[1]
    finally:
        origin.release.set()
        server.close()


def _tools(port: int) -> tuple[ToolSpec, ...]:
    return (
        ToolSpec(
            "hold",
            ("python3", "-c", HOLD, str(port), "{code}"),
            "local",
            (f"hold.test:{port}",),
            LIMITS,
        ),
        ToolSpec("sleep", ("sleep", "30"), limits=ToolLimits(wall_s=1, memory_mb=64)),
    )


def _request(tenant: str, key: str, tool: str = "hold", code: str = "0") -> ToolRunRequest:
    arguments = (("code", code),) if tool == "hold" else ()
    return ToolRunRequest(tenant, "k1", key, tool, arguments, None, max_concurrent_runs=2)


async def _until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + 60
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        await asyncio.sleep(0.02)


def _status(reply: ToolRunReply) -> tuple[int, str, int | None]:
    body = json.loads(reply.body)
    return reply.http_status, body["status"], body["exit_code"]


def _state(store: IdempotencyStore, tenant: str, key: str) -> str | None:
    record = store.find(tenant, key)
    return None if record is None else record.state


@pytest.mark.sandbox
def test_the_n_plus_first_run_gets_429_and_every_ending_gives_its_slot_back(
    sqlite_engine: sa.Engine, default_backend: str
) -> None:
    slots = LocalRunSlots()
    store = IdempotencyStore(sqlite_engine, time.time, lease_s=30)
    resolver = MapResolver({"hold.test": ["127.0.0.2"]})
    runner = LocalRunner(logging.getLogger("t"), resolver, parse_cidrs(["127.0.0.2/32"]))
    service = ToolRunService(store, runner, time.time, logging.getLogger("t"), slots=slots)

    async def scenario() -> None:
        async with _holding_origin() as (origin, port):
            tools = _tools(port)
            first = asyncio.ensure_future(service.submit(tools, _request("acme", "a1")))
            second = asyncio.ensure_future(service.submit(tools, _request("acme", "a2", code="3")))
            await _until(lambda: origin.arrived == 2, "both runs at the origin")
            with pytest.raises(TooManyRuns) as refused:
                await service.submit(tools, _request("acme", "a3"))
            assert (refused.value.status_code, refused.value.retry_after_s) == (429, 1)
            assert slots.held("acme") == 2
            other = await service.submit(tools, _request("globex", "g1", tool="sleep"))
            assert _status(other) == (200, "timed_out", None)  # another tenant still runs
            first.cancel()  # the caller goes away; its run goes on and keeps its slot
            origin.release.set()
            assert _status(await second) == (200, "failed", 3)
            await _until(lambda: slots.held("acme") == 0, "every slot given back")
            # the cancelled caller's run stores its result just after its slot is given back
            await _until(lambda: _state(store, "acme", "a1") == "done", "the first run stored")
            replay = await service.submit(tools, _request("acme", "a1"))
            assert (replay.replayed, _status(replay)) == (True, (200, "succeeded", 0))
            retried = await service.submit(tools, _request("acme", "a3"))  # claim was released
            assert (retried.replayed, _status(retried)) == (False, (200, "succeeded", 0))
        assert (slots.held("acme"), slots.held("globex")) == (0, 0)

    try:
        asyncio.run(scenario())
    finally:
        runner.close()


@pytest.mark.sandbox
def test_a_run_that_cannot_start_gives_its_slot_and_claim_back(
    sqlite_engine: sa.Engine, default_backend: str, tmp_path: object
) -> None:
    """A configured cgroup root that is not a cgroup: the run never starts (fail closed)."""
    slots = LocalRunSlots()
    store = IdempotencyStore(sqlite_engine, time.time, lease_s=30)
    runner = LocalRunner(logging.getLogger("t"), cgroup_root=str(tmp_path))
    service = ToolRunService(store, runner, time.time, logging.getLogger("t"), slots=slots)
    tools = _tools(9)
    try:
        with pytest.raises(SandboxUnavailable):
            asyncio.run(service.submit(tools, _request("acme", "a1", tool="sleep")))
    finally:
        runner.close()
    assert slots.held("acme") == 0
    assert store.find("acme", "a1") is None


@pytest.mark.sandbox
def test_an_egress_proxy_that_cannot_listen_gives_its_slot_and_claim_back(
    sqlite_engine: sa.Engine,
    default_backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A temporary directory too deep for a Unix socket's path (108 bytes): the proxy cannot
    listen, so nothing is spawned; 502, the slot and the claim given back, no folder left."""
    slots = LocalRunSlots()
    store = IdempotencyStore(sqlite_engine, time.time, lease_s=30)
    runner = LocalRunner(logging.getLogger("t"), MapResolver({"hold.test": ["127.0.0.2"]}))
    runner.backend()  # probed (its launcher copied) where the box's user can read it
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    service = ToolRunService(store, runner, time.time, logging.getLogger("t"), slots=slots)
    try:
        with pytest.raises(RunnerFailed) as caught:
            asyncio.run(service.submit(_tools(9), _request("acme", "a1")))
    finally:
        runner.close()
    assert (caught.value.status_code, caught.value.code) == (502, "tool_runner_failed")
    assert str(caught.value).startswith("cannot start the egress proxy: ")
    assert (slots.held("acme"), store.find("acme", "a1")) == (0, None)
    assert sorted(path.name for path in deep.iterdir()) == []


@pytest.mark.redis
def test_redis_run_slots_are_shared_and_expire(redis_url: str, redis_prefix: str) -> None:
    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        one, two = RedisRunSlots(client, redis_prefix), RedisRunSlots(client, redis_prefix)
        try:
            assert [
                await one.acquire("acme", "t1", 2, 60),
                await two.acquire("acme", "t2", 2, 60),
            ] == [True, True]
            assert await one.acquire("acme", "t3", 2, 60) is False
            assert await two.acquire("globex", "t4", 2, 60) is True
            await two.release("acme", "t1")  # any process may give a slot back
            assert await one.acquire("acme", "t3", 2, 60) is True
            assert await client.zcard(redis_prefix + "acme") == 2
            assert await one.acquire("short", "t5", 1, 0.05) is True
            await asyncio.sleep(0.2)  # past its ttl: a dead gateway's slot frees itself
            assert await one.acquire("short", "t6", 1, 60) is True
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_slots_on_a_redis_that_does_not_answer_refuse_the_run_and_free_the_key(
    sqlite_engine: sa.Engine,
) -> None:
    """Fail closed with 503 (no run starts uncounted); the claim is forgotten, so the same key
    runs once the slots answer again."""
    store = IdempotencyStore(sqlite_engine, time.time, lease_s=30)
    runner = LocalRunner(logging.getLogger("t"))

    async def scenario() -> None:
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        client = aioredis.from_url(f"redis://127.0.0.1:{closed.getsockname()[1]}")
        slots = RedisRunSlots(client, "lantern-test:")
        service = ToolRunService(store, runner, time.time, logging.getLogger("t"), slots=slots)
        try:
            with pytest.raises(SandboxUnavailable) as caught:
                await service.submit(_tools(9), _request("acme", "a1", tool="sleep"))
            assert (caught.value.status_code, str(caught.value)) == (
                503,
                "tool run slots: Redis unavailable (ConnectionError)",
            )
            await slots.release("acme", "never-taken")  # best effort, never raises
        finally:
            await client.aclose()
            closed.close()

    try:
        asyncio.run(scenario())
    finally:
        runner.close()
    assert store.find("acme", "a1") is None
