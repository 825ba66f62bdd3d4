"""The replay stores keep the same promises, the in-process one (the reference path) and the
Redis one against the real server: one claim wins, a different request is a mismatch, writes
are fenced, a lapsed lease is taken over, a reply over the cap is marked, records expire, and
one tenant's records are bounded by count and by bytes without touching another's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.replay.records import Entry, Page, ReplyHead
from gateway.replay.redis_store import RedisReplayStore
from gateway.replay.store import MemoryReplayStore, ReplayStore

HEAD = ReplyHead(200, (("content-type", "text/event-stream"),)).to_entry()
TTL_S = 60.0


def _chunks(page: Page) -> list[bytes]:
    return [e.data for e in page.entries if e.kind == "chunk"]


async def _promises(store: ReplayStore, sleep: Callable[[float], Awaitable[None]]) -> None:
    assert (await store.claim("acme:k1", "fp-a", 10.0, TTL_S)).kind == "new"
    assert (await store.claim("acme:k1", "fp-a", 10.0, TTL_S)).kind == "running"
    assert (await store.claim("acme:k1", "fp-b", 10.0, TTL_S)).kind == "mismatch"
    assert (await store.claim("other:k1", "fp-a", 10.0, TTL_S)).kind == "new"  # another scope
    assert await store.append("acme:k1", 1, [HEAD, Entry("chunk", b"data: 1\n\n")], 10.0, TTL_S)
    assert not await store.append("acme:k1", 2, [Entry("chunk", b"stale")], 10.0, TTL_S)
    page = await store.read("acme:k1", 0, 0.0)
    assert (page.state, page.fence, page.is_leased) == ("running", 1, True)
    assert [e.kind for e in page.entries] == ["head", "chunk"]
    waiting = asyncio.ensure_future(store.read("acme:k1", 2, 1.5))  # blocks for the next one
    await sleep(0.05)
    assert await store.append("acme:k1", 1, [Entry("chunk", b"\x00\xff"), Entry("end", b"done")], 10.0, TTL_S)  # fmt: skip
    assert _chunks(await waiting) == [b"\x00\xff"]
    done = await store.read("acme:k1", 0, 0.0)
    assert done.state == "done" and _chunks(done) == [b"data: 1\n\n", b"\x00\xff"]
    assert (await store.claim("acme:k1", "fp-a", 10.0, TTL_S)).kind == "done"
    assert not await store.append("acme:k1", 1, [Entry("chunk", b"late")], 10.0, TTL_S)
    # a lapsed lease: the next claim takes over with fence 2 and a clean record
    assert (await store.claim("acme:k2", "fp-a", 0.05, TTL_S)).kind == "new"
    assert await store.append("acme:k2", 1, [HEAD], 0.05, TTL_S)
    await sleep(0.1)
    assert (await store.read("acme:k2", 0, 0.0)).is_leased is False
    taken = await store.claim("acme:k2", "fp-a", 10.0, TTL_S)
    assert (taken.kind, taken.fence) == ("new", 2)
    assert (await store.read("acme:k2", 0, 0.0)).entries == ()
    assert not await store.renew("acme:k2", 1, 10.0)  # the old owner writes nothing
    assert await store.renew("acme:k2", 2, 10.0)
    # over the cap: marked, entries dropped, replays refused by the service
    assert await store.append("acme:k2", 2, [HEAD, Entry("end", b"too_large")], 10.0, TTL_S)
    assert (await store.claim("acme:k2", "fp-a", 10.0, TTL_S)).kind == "too_large"
    assert (await store.read("acme:k2", 0, 0.0)).entries == ()
    # released: the key is free again
    assert (await store.claim("acme:k3", "fp-a", 10.0, TTL_S)).kind == "new"
    await store.release("acme:k3", 1)
    assert (await store.read("acme:k3", 0, 0.0)).state is None
    assert (await store.claim("acme:k3", "fp-b", 10.0, TTL_S)).kind == "new"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def test_memory_store_keeps_the_promises() -> None:
    clock = FakeClock()
    asyncio.run(_promises(MemoryReplayStore(clock), clock.sleep))


def test_memory_store_sweeps_expired_records() -> None:
    async def main() -> None:
        clock = FakeClock()
        store = MemoryReplayStore(clock)
        await store.claim("acme:k1", "fp", 10.0, 100.0)
        await store.claim("acme:k2", "fp", 10.0, 300.0)
        clock.now += 200
        assert store.sweep() == 1
        assert (await store.claim("acme:k1", "fp-other", 10.0, 100.0)).kind == "new"
        assert (await store.claim("acme:k2", "fp-other", 10.0, 100.0)).kind == "mismatch"

    asyncio.run(main())


def test_memory_store_is_bounded_and_one_tenants_burst_keeps_anothers_records() -> None:
    """A tenant sending fresh keys fills the table only up to `max_records`, losing its own
    oldest records; the quieter tenant's finished reply is still replayed."""

    async def main() -> None:
        clock = FakeClock()
        store = MemoryReplayStore(clock, max_records=4)
        assert (await store.claim("quiet:k1", "fp", 10.0, TTL_S)).kind == "new"
        assert await store.append("quiet:k1", 1, [HEAD, Entry("end", b"done")], 10.0, TTL_S)
        assert (await store.claim("noisy:k0", "fp", 10.0, TTL_S)).kind == "new"
        waiting = asyncio.ensure_future(store.read("noisy:k0", 0, 5.0))  # blocks for an entry
        await asyncio.sleep(0)
        for n in range(1, 100):
            assert (await store.claim(f"noisy:k{n}", "fp", 10.0, TTL_S)).kind == "new"
        assert (await waiting).state is None  # a reader of an evicted record is told so
        assert (await store.claim("quiet:k1", "fp", 10.0, TTL_S)).kind == "done"
        found = [(await store.read(f"noisy:k{n}", 0, 0.0)).state for n in range(100)]
        assert found == [None] * 97 + ["running"] * 3
        assert not await store.append("noisy:k0", 1, [HEAD], 10.0, TTL_S)  # its owner: no more
        assert (await store.claim("noisy:k0", "fp", 10.0, TTL_S)).kind == "new"

    asyncio.run(main())


@pytest.mark.redis
def test_redis_store_keeps_the_promises(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        store = RedisReplayStore.from_url(redis_url, 100, key_prefix=redis_prefix)
        try:
            await _promises(store, asyncio.sleep)
        finally:
            await store.aclose()

    asyncio.run(main())


@pytest.mark.redis
def test_redis_store_expires_records_itself(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        store = RedisReplayStore.from_url(redis_url, 100, key_prefix=redis_prefix)
        try:
            await store.claim("acme:k1", "fp", 10.0, 0.05)
            await asyncio.sleep(0.1)
            assert (await store.read("acme:k1", 0, 0.0)).state is None
            assert (await store.claim("acme:k1", "fp-other", 10.0, TTL_S)).kind == "new"
        finally:
            await store.aclose()

    asyncio.run(main())


TENANT_KEYS = {"", ".sizes", ".bytes"}  # the index, its records' sizes and their total


async def _keys_of(redis_url: str, prefix: str, tenant: str) -> set[str]:
    client = Redis.from_url(redis_url)
    try:
        found = [key async for key in client.scan_iter(match=f"{prefix}{{{tenant}}}*")]
    finally:
        await client.aclose()
    return {key.decode().removeprefix(f"{prefix}{{{tenant}}}") for key in found}


@pytest.mark.redis
def test_redis_store_bounds_each_tenant_and_a_burst_loses_its_own_oldest(
    redis_url: str, redis_prefix: str
) -> None:
    """A tenant sending fresh keys keeps at most `max_records` records in the shared Redis,
    losing its own oldest (their keys deleted); another tenant's records stay replayable."""

    async def main() -> None:
        store = RedisReplayStore.from_url(redis_url, 4, key_prefix=redis_prefix)
        try:
            for n in range(4):
                assert (await store.claim(f"quiet:k{n}", "fp", 10.0, TTL_S)).kind == "new"
                done = [HEAD, Entry("chunk", b"data: q\n\n"), Entry("end", b"done")]
                assert await store.append(f"quiet:k{n}", 1, done, 10.0, TTL_S)
            assert (await store.claim("noisy:k0", "fp", 10.0, TTL_S)).kind == "new"
            assert await store.append("noisy:k0", 1, [HEAD], 10.0, TTL_S)
            for n in range(1, 100):
                assert (await store.claim(f"noisy:k{n}", "fp", 10.0, TTL_S)).kind == "new"
            found = [(await store.read(f"noisy:k{n}", 0, 0.0)).state for n in range(100)]
            assert found == [None] * 96 + ["running"] * 4
            assert not await store.append("noisy:k0", 1, [HEAD], 10.0, TTL_S)  # owner: no more
            for n in range(4):
                page = await store.read(f"quiet:k{n}", 0, 0.0)
                assert (page.state, _chunks(page)) == ("done", [b"data: q\n\n"])
                assert (await store.claim(f"quiet:k{n}", "fp", 10.0, TTL_S)).kind == "done"
            # the index and the live records' hashes (no entries yet: no streams); nothing else
            kept = {f":k{n}:m" for n in range(96, 100)}
            assert await _keys_of(redis_url, redis_prefix, "noisy") == TENANT_KEYS | kept
            quiet = {f":k{n}:{part}" for n in range(4) for part in "me"}
            assert await _keys_of(redis_url, redis_prefix, "quiet") == TENANT_KEYS | quiet
            assert (await store.claim("noisy:k0", "fp", 10.0, TTL_S)).kind == "new"
        finally:
            await store.aclose()

    asyncio.run(main())


@pytest.mark.redis
def test_redis_store_bound_holds_across_processes(redis_url: str, redis_prefix: str) -> None:
    """Two stores on one Redis (two gateway processes): the tenant's bound is one bound, kept
    by whichever claims, in order and in a burst; the other tenant's records stay."""

    async def main() -> None:
        one = RedisReplayStore.from_url(redis_url, 5, key_prefix=redis_prefix)
        two = RedisReplayStore.from_url(redis_url, 5, key_prefix=redis_prefix)
        try:
            for n in range(3):
                assert (await two.claim(f"b:k{n}", "fp", 10.0, TTL_S)).kind == "new"
                assert await two.append(f"b:k{n}", 1, [HEAD, Entry("end", b"done")], 10.0, TTL_S)
            for n in range(10):  # alternating processes, one after the other
                store = (one, two)[n % 2]
                assert (await store.claim(f"a:k{n}", "fp", 10.0, TTL_S)).kind == "new"
            found = [(await one.read(f"a:k{n}", 0, 0.0)).state for n in range(10)]
            assert found == [None] * 5 + ["running"] * 5
            assert not await two.renew("a:k1", 1, 10.0)  # its owner lost it to the other's claim
            burst = [(one, two)[n % 2].claim(f"a:burst{n}", "fp", 10.0, TTL_S) for n in range(40)]
            assert [c.kind for c in await asyncio.gather(*burst)] == ["new"] * 40
            live = [(await two.read(f"a:burst{n}", 0, 0.0)).state for n in range(40)]
            assert live.count("running") == 5 and live.count(None) == 35
            assert await _keys_of(redis_url, redis_prefix, "a") == TENANT_KEYS | {
                f":burst{n}:m" for n, state in enumerate(live) if state == "running"
            }
            for n in range(3):
                assert (await one.claim(f"b:k{n}", "fp", 10.0, TTL_S)).kind == "done"
            b_keys = {f":k{n}:{part}" for n in range(3) for part in "me"}
            assert await _keys_of(redis_url, redis_prefix, "b") == TENANT_KEYS | b_keys
        finally:
            await one.aclose()
            await two.aclose()

    asyncio.run(main())


BIG = b"x" * 2000


async def _bytes_bound(store: ReplayStore, noisy_kept: int) -> None:
    """`max_bytes` 10,000: a tenant keying 2,000-byte replies loses its own oldest records
    (never the one it is writing), the quiet tenant's 3,000-byte reply stays replayable; a
    record taken over or over the cap weighs nothing more."""
    assert (await store.claim("quiet:k", "fp", 10.0, TTL_S)).kind == "new"
    done = [HEAD, Entry("chunk", b"q" * 3000), Entry("end", b"done")]
    assert await store.append("quiet:k", 1, done, 10.0, TTL_S)
    for n in range(10):
        assert (await store.claim(f"noisy:k{n}", "fp", 10.0, TTL_S)).kind == "new"
        assert await store.append(f"noisy:k{n}", 1, [HEAD, Entry("chunk", BIG)], 10.0, TTL_S)
        assert await store.append(f"noisy:k{n}", 1, [Entry("end", b"done")], 10.0, TTL_S)
    found = [(await store.read(f"noisy:k{n}", 0, 0.0)).state for n in range(10)]
    assert found == [None] * (10 - noisy_kept) + ["done"] * noisy_kept
    quiet = await store.read("quiet:k", 0, 0.0)
    assert (quiet.state, _chunks(quiet)) == ("done", [b"q" * 3000])
    # the first reply being written pushes out one more; marked too large or released, each
    # frees its bytes, so the three after it push out nothing
    for n in range(10, 14):
        assert (await store.claim(f"noisy:k{n}", "fp", 10.0, TTL_S)).kind == "new"
        assert await store.append(f"noisy:k{n}", 1, [HEAD, Entry("chunk", BIG)], 10.0, TTL_S)
        end = Entry("end", b"too_large" if n % 2 else b"done")
        if n % 2:
            assert await store.append(f"noisy:k{n}", 1, [end], 10.0, TTL_S)
        else:
            await store.release(f"noisy:k{n}", 1)
    found = [(await store.read(f"noisy:k{n}", 0, 0.0)).state for n in range(10)]
    assert found == [None] * (11 - noisy_kept) + ["done"] * (noisy_kept - 1)


def test_memory_store_bounds_the_bytes_and_the_heaviest_tenant_pays() -> None:
    """In process the bound is on all tenants together: 3,000 bytes are the quiet tenant's, so
    the noisy one keeps three of its 2,000-byte replies."""
    clock = FakeClock()
    store = MemoryReplayStore(clock, max_records=100, max_bytes=10_000)
    asyncio.run(_bytes_bound(store, noisy_kept=3))


@pytest.mark.redis
def test_redis_store_bounds_each_tenants_bytes(redis_url: str, redis_prefix: str) -> None:
    """In Redis the bound is each tenant's, kept by two processes together; the tenant's total
    is the sum of its live records' entries."""

    async def main() -> None:
        one = RedisReplayStore.from_url(redis_url, 100, redis_prefix, max_bytes=10_000)
        two = RedisReplayStore.from_url(redis_url, 100, redis_prefix, max_bytes=10_000)
        client = Redis.from_url(redis_url)
        try:
            await _bytes_bound(_Alternating(one, two), noisy_kept=4)
            total = int(await client.get(f"{redis_prefix}{{noisy}}.bytes") or b"0")
            sizes = await client.hgetall(f"{redis_prefix}{{noisy}}.sizes")
            one_reply = len(HEAD.data) + len(BIG) + len(b"done")
            assert total == sum(int(v) for v in sizes.values()) == 3 * one_reply
        finally:
            await one.aclose()
            await two.aclose()
            await client.aclose()

    asyncio.run(main())


class _Alternating:
    """Two stores taking turns, as two gateway processes sharing one Redis."""

    def __init__(self, one: ReplayStore, two: ReplayStore) -> None:
        self._stores, self._turn = (one, two), 0

    def __getattr__(self, name: str) -> Any:
        self._turn += 1
        return getattr(self._stores[self._turn % 2], name)
