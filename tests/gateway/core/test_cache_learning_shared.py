"""The learnt cache places shared through the real Redis: two tables stand for two gateway
processes. A place learnt in one is read by the other before its first call of the tenant;
another tenant's places are its own; a tenant's places are bounded; Redis down or its data
broken, each process learns alone and no call fails."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from redis.asyncio import Redis

from gateway.core.cache_learning import LearnedPlaces
from gateway.core.cache_learning_shared import SharedPlaces

PLACE = r"(?<=Build )[^\n]{1,64}?(?= of the workspace)"


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _pair(redis_url: str, prefix: str, **kw: Any) -> tuple[SharedPlaces, SharedPlaces, Clock]:
    clock = Clock()
    a, b = (
        SharedPlaces(
            Redis.from_url(redis_url), LearnedPlaces(), key_prefix=prefix, clock=clock, **kw
        )
        for _ in range(2)
    )
    return a, b, clock


async def _settle(shared: SharedPlaces) -> None:
    while shared._tasks:
        await anyio.sleep(0.01)


def test_a_place_learnt_in_one_process_is_read_by_the_others(
    redis_url: str, redis_prefix: str
) -> None:
    async def main() -> None:
        a, b, clock = _pair(redis_url, redis_prefix)
        try:
            assert a._places.add("acme", PLACE)
            await _settle(a)  # written off the path
            ready = b.ready("acme")
            assert ready is not None  # b has not read acme's places yet: its first call waits
            await ready
            assert b._places.patterns("acme") == (PLACE,)
            assert b.ready("acme") is None  # read: the next calls do not touch Redis
            other = b.ready("globex")
            assert other is not None
            await other
            assert b._places.patterns("globex") == ()  # another tenant's places are its own
            # learnt in b later: a sees it once its copy is stale, read in the background
            b._places.add("acme", PLACE.replace("Build", "Run"))
            await _settle(b)
            first = a.ready("acme")  # never read in a: awaited
            assert first is not None
            await first
            clock.now_s += 10.0
            assert b.ready("acme") is None  # stale: read again in the background
            await _settle(b)
            assert len(b._places.patterns("acme")) == 2
        finally:
            await a.aclose()
            await b.aclose()

    anyio.run(main)


def test_a_tenants_shared_places_are_bounded_and_expire(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        a, b, _ = _pair(redis_url, redis_prefix, max_places=3, ttl_s=60.0)
        client = Redis.from_url(redis_url)
        try:
            for n in range(5):
                a._places.add("acme", PLACE.replace("Build", f"Build{n}"))
                await _settle(a)
            key = a.key("acme")
            assert await client.zcard(key) == 3  # the oldest dropped first
            assert 0 < await client.pttl(key) <= 60_000
            await b.ready("acme")  # type: ignore[misc]
            assert b._places.patterns("acme")[0] == PLACE.replace("Build", "Build2")
        finally:
            await client.delete(a.key("acme"))
            await client.aclose()
            await a.aclose()
            await b.aclose()

    anyio.run(main)


def test_broken_shared_places_are_left_out(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        a, _, _ = _pair(redis_url, redis_prefix)
        client = Redis.from_url(redis_url)
        try:
            await client.zadd(a.key("acme"), {"(unclosed": 1.0, "x" * 600: 2.0, PLACE: 3.0})
            await a.ready("acme")  # type: ignore[misc]
            assert a._places.patterns("acme") == (PLACE,)
        finally:
            await client.delete(a.key("acme"))
            await client.aclose()
            await a.aclose()

    anyio.run(main)


def test_with_redis_down_each_process_learns_alone(caplog: Any) -> None:
    async def main() -> None:
        down = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
        clock = Clock()
        shared = SharedPlaces(down, LearnedPlaces(), clock=clock)
        try:
            ready = shared.ready("acme")
            assert ready is not None
            await ready  # no exception: the call goes on without shared places
            assert shared._places.add("acme", PLACE)  # learnt here all the same
            await _settle(shared)
            assert shared._places.patterns("acme") == (PLACE,)
            clock.now_s += 10.0
            assert shared.ready("acme") is None  # stale: read in the background, fails too
            await _settle(shared)
            assert shared.ready("globex") is None  # down: left alone for a while
        finally:
            await shared.aclose()

    with caplog.at_level(logging.WARNING):
        anyio.run(main)
    assert "learning alone" in caplog.text
