"""Fixtures for the quota tests: each store kind, the Redis one on its own key prefix, and a
private redis-server a test may stop, restart or misconfigure."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from quotas.errors import QuotaStoreUnavailable
from quotas.limits import (
    Actual,
    Ask,
    Limits,
    Reservation,
    Settlement,
    ToolCallLease,
    ToolCallLimits,
    UsageSnapshot,
)
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore
from tests.conftest import _is_ci

StoreFactory = Callable[[], QuotaStore]


def delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_store_factory(redis_url: str, redis_prefix: str) -> Iterator[StoreFactory]:
    """New `RedisQuotaStore`s on one test-owned prefix (one per event loop); keys dropped after."""
    yield lambda: RedisQuotaStore.from_url(redis_url, key_prefix=redis_prefix)
    delete_prefix(redis_url, redis_prefix)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """Each test using it runs once per store kind, with identical expectations."""
    if request.param == "memory":
        return MemoryQuotaStore
    factory: StoreFactory = request.getfixturevalue("redis_store_factory")
    return factory


class SwitchableStore:
    """A shared store that can be taken down: a `MemoryQuotaStore` behind a switch.

    Stands in for Redis where a test needs an outage at an exact step; `calls` counts attempts.
    """

    name = "redis"
    settles_inline = False  # stands in for Redis, whose settle is a round trip

    def __init__(self) -> None:
        self.inner = MemoryQuotaStore()
        self.is_down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.is_down:
            raise QuotaStoreUnavailable("redis", "ConnectionError")

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        self._check()
        held = await self.inner.reserve(
            tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        return replace(held, store="redis")

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        self._check()
        return await self.inner.settle(reservation, actual, now_ms=now_ms)

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        self._check()
        await self.inner.seed_spend(tenant, period, spend_micro_usd, now_ms=now_ms)

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        self._check()
        return await self.inner.usage(tenant, limits, now_ms=now_ms, session_id=session_id)

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        self._check()
        lease = await self.inner.admit_tool_call(
            tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
        )
        return replace(lease, store="redis")

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        self._check()
        await self.inner.end_tool_call(lease, now_ms=now_ms)

    async def close(self) -> None:
        return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnRedis:
    """A private redis-server (random port, RDB in a temp dir) that a test may stop and restart."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--dbfilename",
                "dump.rdb",
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        """SHUTDOWN SAVE: the data comes back on restart, as with a persistent Redis."""
        with contextlib.suppress(redis.ConnectionError):  # the server hangs up as it exits
            redis.Redis(port=self.port).shutdown(save=True)
        assert self.process is not None
        self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed"
        if _is_ci():
            pytest.fail(message)
        pytest.skip(message)
    server = OwnRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()
