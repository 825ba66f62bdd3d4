"""A put never undoes a delete nor replaces a stored response, in both stores (the Redis one
against the real server): a DELETE sent while a response still streams sticks, an upstream
that reuses an id cannot overwrite the tenant's earlier response, and a response larger than
the bound evicts nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway.responses.redis_store import RedisResponseStore
from gateway.responses.store import MemoryResponseStore, PutOutcome, ResponseStore, StoredResponse

ITEM = {"type": "message", "role": "user", "content": "hello"}
FIRST = StoredResponse((ITEM,), {"id": "resp_1", "object": "response", "output": []})
SECOND = StoredResponse((ITEM, ITEM), {"id": "resp_1", "object": "response", "output": []})
TTL_S = 60
MAX_ENTRIES = 3
Clock = list[float]  # the wall clock both stores are given, in seconds


def _memory(_redis_url: str, _prefix: str, now: Clock) -> MemoryResponseStore:
    return MemoryResponseStore(TTL_S, MAX_ENTRIES, clock=lambda: now[0], max_bytes=1000)


def _redis(redis_url: str, prefix: str, now: Clock) -> RedisResponseStore:
    store = RedisResponseStore.from_url(redis_url, TTL_S, MAX_ENTRIES, prefix, max_bytes=1000)
    store._wall = lambda: now[0]
    return store


Build = Callable[[str, str, Clock], ResponseStore]
STORES = pytest.mark.parametrize("build", [_memory, _redis], ids=["memory", "redis"])


def _run(
    build: Build, request: pytest.FixtureRequest, check: Callable[..., Awaitable[None]]
) -> None:
    redis_url = request.getfixturevalue("redis_url") if build is _redis else ""
    prefix = request.getfixturevalue("redis_prefix") if build is _redis else ""

    async def main() -> None:
        now = [1_000_000.0]
        store = build(redis_url, prefix, now)
        try:
            await check(store, now)
        finally:
            if isinstance(store, RedisResponseStore) and (
                keys := await store._client.keys(prefix + "*")
            ):
                await store._client.delete(*keys)
            await store.aclose()

    asyncio.run(main())


@STORES
def test_a_delete_before_the_put_sticks_for_the_ttl(
    build: Build, request: pytest.FixtureRequest
) -> None:
    """A DELETE that finds nothing yet (the response still streams) keeps the put that comes
    after it from storing; another tenant's DELETE of the same id changes nothing for acme;
    past the TTL the id may be stored again."""

    async def check(store: ResponseStore, now: Clock) -> None:
        assert await store.delete("globex", "resp_1") is False
        assert await store.delete("acme", "resp_1") is False
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.DELETED
        assert await store.get("acme", "resp_1") is None
        assert await store.get_reply("acme", "resp_1") is None
        assert await store.put("other", "resp_1", FIRST.to_bytes()) is PutOutcome.STORED
        now[0] += TTL_S - 1
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.DELETED
        now[0] += 2
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.STORED
        assert await store.get("acme", "resp_1") == FIRST

    _run(build, request, check)


@STORES
def test_a_deleted_response_is_not_stored_again(
    build: Build, request: pytest.FixtureRequest
) -> None:
    async def check(store: ResponseStore, now: Clock) -> None:
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.STORED
        assert await store.delete("acme", "resp_1") is True
        assert await store.put("acme", "resp_1", SECOND.to_bytes()) is PutOutcome.DELETED
        assert await store.get("acme", "resp_1") is None

    _run(build, request, check)


@STORES
def test_a_put_never_replaces_a_stored_response(
    build: Build, request: pytest.FixtureRequest
) -> None:
    """An upstream reusing an id: the first response stays whole (its reply and conversation),
    the second is refused."""

    async def check(store: ResponseStore, now: Clock) -> None:
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.STORED
        assert await store.put("acme", "resp_1", SECOND.to_bytes()) is PutOutcome.TAKEN
        assert await store.get("acme", "resp_1") == FIRST
        assert await store.put("globex", "resp_1", SECOND.to_bytes()) is PutOutcome.STORED
        assert await store.get("globex", "resp_1") == SECOND

    _run(build, request, check)


@STORES
def test_deleted_ids_are_bounded_per_tenant(build: Build, request: pytest.FixtureRequest) -> None:
    """A tenant's flood of DELETEs forgets its own oldest deleted ids, never another's: in
    Redis each tenant keeps `max_entries`, in the process they are that many in all (as the
    responses are), the tenant holding the most losing its oldest."""

    async def check(store: ResponseStore, now: Clock) -> None:
        await store.delete("globex", "g0")
        for n in range(MAX_ENTRIES + 2):
            await store.delete("acme", f"a{n}")
        num_kept = MAX_ENTRIES if isinstance(store, RedisResponseStore) else MAX_ENTRIES - 1
        refused = [await store.put("acme", f"a{n}", FIRST.to_bytes()) for n in range(5)]
        assert refused == [PutOutcome.STORED] * (5 - num_kept) + [PutOutcome.DELETED] * num_kept
        assert await store.put("globex", "g0", FIRST.to_bytes()) is PutOutcome.DELETED

    _run(build, request, check)


@STORES
def test_a_response_over_the_bound_evicts_nothing(
    build: Build, request: pytest.FixtureRequest
) -> None:
    """A response larger than the whole byte bound is refused before anything is written: the
    tenant's earlier responses stay."""

    async def check(store: ResponseStore, now: Clock) -> None:
        assert await store.put("acme", "resp_1", FIRST.to_bytes()) is PutOutcome.STORED
        huge = StoredResponse((ITEM,), {"id": "resp_2", "instructions": "x" * 1000})
        outcome = await store.put("acme", "resp_2", huge.to_bytes())
        assert await store.get("acme", "resp_1") == FIRST
        assert await store.get("acme", "resp_2") is None
        assert outcome is PutOutcome.TOO_LARGE

    _run(build, request, check)
