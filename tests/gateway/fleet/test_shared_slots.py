"""A replica's slots shared by gateway processes through the real Redis (gateway/fleet/
shared_slots.py, slot_store.py): two processes together never hold more than the capacity, a
release in one wakes the other's waiters in that process's fair order, a dead process's slots
come back when their leases expire, and with Redis cut each process counts its own slots, on
purpose and logged."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from gateway.fleet.shared_link import SharedLink
from gateway.fleet.shared_slots import SharedSlots
from gateway.fleet.slot_store import RedisSlots
from tests.fakes.tcp_cut import TcpCut
from tests.quotas.conftest import delete_prefix

pytestmark = pytest.mark.redis
KEY = "local@http://a"


@pytest.fixture
def prefix(redis_url: str, redis_prefix: str) -> Iterator[str]:
    yield redis_prefix
    delete_prefix(redis_url, redis_prefix)


def process(url: str, prefix: str, lease_s: float = 15.0) -> SharedSlots:
    """One gateway process's slots (its listener not started)."""
    link = SharedLink(time.monotonic, registry=CollectorRegistry())
    store = RedisSlots.from_url(url, key_prefix=prefix, lease_s=lease_s)
    return SharedSlots(store, Redis.from_url(url), link, time.monotonic, poll_s=0.05)


async def wait(slots: SharedSlots, tenant: str, max_wait_s: float = 30.0) -> float | None:
    return await slots.wait(KEY, 2, tenant, weight=1.0, max_wait_s=max_wait_s, service_s=None)


async def until(check: object, what: str) -> None:
    for _ in range(400):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_two_processes_never_hold_more_than_the_capacity(redis_url: str, prefix: str) -> None:
    async def go() -> None:
        a, b = process(redis_url, prefix), process(redis_url, prefix)
        listening = [asyncio.create_task(p.run()) for p in (a, b)]
        try:
            assert [await wait(a, "acme"), await wait(b, "acme")] == [None, None]  # at once
            assert await a.store.held(KEY) == 2
            served: list[str] = []

            async def queued(name: str, tenant: str) -> None:
                waited = await wait(a, tenant)
                assert waited is not None and waited >= 0  # it queued
                served.append(name)

            # one at a time: calls that arrive together join the queue in the order Redis
            # answers their first try, so each joins before the next arrives
            tasks: list[asyncio.Task[None]] = []
            for name in ("acme0", "acme1", "acme2", "globex0"):
                tasks.append(asyncio.create_task(queued(name, name[:-1])))
                n = len(tasks)
                await until(lambda n=n: a.waiting(KEY) == n, f"{name} queued in process a")
            for expected in (1, 2, 3, 4):  # b's slot, then a's own, one release at a time
                (b if expected == 1 else a).release(KEY)
                await until(lambda e=expected: len(served) == e, f"{expected} served")
                assert await a.store.held(KEY) == 2
            await asyncio.gather(*tasks)
            # a tenant's one call goes before another's backlog, in the order of its process
            assert served == ["acme0", "globex0", "acme1", "acme2"]
            a.release(KEY)
            a.release(KEY)
            assert a.held(KEY) == 0
            for _ in range(400):  # the releases are sent off the caller's path
                if await a.store.held(KEY) == 0:
                    break
                await asyncio.sleep(0.01)
            assert await a.store.held(KEY) == 0
        finally:
            for t in listening:
                t.cancel()
            await a.aclose()
            await b.aclose()

    asyncio.run(go())


def test_a_dead_processes_slots_come_back_after_the_lease(redis_url: str, prefix: str) -> None:
    async def go() -> None:
        dead = process(redis_url, prefix, lease_s=0.3)  # never released, never renewed
        alive = process(redis_url, prefix, lease_s=0.3)
        try:
            assert [await wait(dead, "acme"), await wait(dead, "acme")] == [None, None]
            waited = await wait(alive, "globex")  # polls until the leases expire
            assert waited is not None and waited > 0
            assert await alive.store.held(KEY) == 1
        finally:
            await alive.aclose()
            await dead.store.aclose()

    asyncio.run(go())


def test_redis_cut_each_process_counts_its_own(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    proxy = TcpCut((host, int(port)))
    proxy.restore()
    url = f"redis://127.0.0.1:{proxy.port}/0"

    async def go() -> None:
        slots = process(url, prefix)
        try:
            assert await wait(slots, "acme") is None  # a lease in Redis
            proxy.cut()
            assert await wait(slots, "acme") is None  # this process's own count
            assert slots.link.is_down and slots.held(KEY) == 2
            waiting = asyncio.create_task(wait(slots, "globex"))
            await until(lambda: slots.waiting(KEY) == 1, "the third waits")
            slots.release(KEY)  # the local slot: the waiter takes it on this process's count
            assert await waiting is not None
            assert slots.held(KEY) == 2
        finally:
            proxy.cut()
            await slots.aclose()

    with caplog.at_level(logging.WARNING, "lantern.fleet.shared"):
        asyncio.run(go())
    assert "shared fleet store unreachable (slots" in caplog.text
