"""Stored responses: the in-process store and the Redis store keep the same promises (scoped
by tenant, expiring, deletable), the Redis one against the real server."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.responses.redis_store import RedisResponseStore
from gateway.responses.store import (
    MemoryResponseStore,
    PutOutcome,
    ResponseStore,
    StoredResponse,
)

ITEMS = (
    {"type": "message", "role": "user", "content": "hello"},
    {"id": "msg_1_0", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
)  # fmt: skip
STORED = StoredResponse(ITEMS, {"id": "resp_1", "object": "response", "output": [ITEMS[1]]})


async def _promises(store: ResponseStore) -> None:
    await store.put("acme", "resp_1", STORED.to_bytes())
    assert await store.get("acme", "resp_1") == STORED
    assert await store.get_reply("acme", "resp_1") == orjson.dumps(STORED.response)
    assert await store.get("other", "resp_1") is None  # another tenant: as if it never was
    assert await store.get_reply("other", "resp_1") is None
    assert await store.delete("other", "resp_1") is False
    assert await store.get("acme", "resp_1") == STORED
    assert await store.delete("acme", "resp_1") is True
    assert await store.get("acme", "resp_1") is None
    assert await store.delete("acme", "resp_1") is False


def test_memory_store_keeps_the_promises() -> None:
    asyncio.run(_promises(MemoryResponseStore(ttl_s=60, max_entries=10)))


def test_redis_store_keeps_the_promises(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        store = RedisResponseStore.from_url(
            redis_url, ttl_s=60, max_entries=10, key_prefix=redis_prefix
        )
        try:
            await _promises(store)
        finally:
            await store.aclose()

    asyncio.run(main())


def test_redis_store_sets_the_ttl_on_a_tenant_scoped_key(redis_url: str, redis_prefix: str) -> None:
    async def main() -> tuple[list[bytes], int]:
        store = RedisResponseStore.from_url(
            redis_url, ttl_s=90, max_entries=10, key_prefix=redis_prefix
        )
        try:
            await store.put("acme", "resp_9", STORED.to_bytes())
            client = store._client
            keys = sorted(await client.keys(redis_prefix + "*"))
            ttl = await client.ttl(keys[1])
            await store.delete("acme", "resp_9")
            return keys, ttl
        finally:
            await store.aclose()

    keys, ttl = asyncio.run(main())
    # the tenant's index of its ids, its total bytes and their sizes, then the response
    index = f"{redis_prefix}{{acme}}"
    assert keys == [k.encode() for k in (index, index + ".bytes", index + ".sizes")] + [
        f"{index}:resp_9".encode()
    ]
    assert 85 <= ttl <= 90


def test_redis_store_keeps_each_tenant_to_its_bound(redis_url: str, redis_prefix: str) -> None:
    async def main() -> None:
        store = RedisResponseStore.from_url(
            redis_url, ttl_s=60, max_entries=3, key_prefix=redis_prefix
        )
        try:
            await store.put("acme", "a0", STORED.to_bytes())
            for n in range(5):
                await store.put("globex", f"g{n}", STORED.to_bytes())
            kept = [n for n in range(5) if await store.get("globex", f"g{n}") is not None]
            assert kept == [2, 3, 4]  # the oldest two went, with their keys
            assert await store.get("acme", "a0") == STORED
            assert await store._client.zcard(f"{redis_prefix}{{globex}}") == 3
            assert await store.delete("globex", "g4") is True
            assert await store._client.zcard(f"{redis_prefix}{{globex}}") == 2
        finally:
            await store._client.delete(*await store._client.keys(redis_prefix + "*"))
            await store.aclose()

    asyncio.run(main())


def test_redis_store_keeps_each_tenant_to_its_bytes(redis_url: str, redis_prefix: str) -> None:
    """Each tenant within `max_bytes` (three responses' worth here): its oldest go first, its
    total follows deletes and replacements, another tenant's responses stay."""
    size = len(STORED.to_bytes())

    async def main() -> None:
        store = RedisResponseStore.from_url(
            redis_url, ttl_s=60, max_entries=100, key_prefix=redis_prefix, max_bytes=3 * size
        )
        total = f"{redis_prefix}{{globex}}.bytes"
        try:
            await store.put("acme", "a0", STORED.to_bytes())
            for n in range(5):
                await store.put("globex", f"g{n}", STORED.to_bytes())
            kept = [n for n in range(5) if await store.get("globex", f"g{n}") is not None]
            assert kept == [2, 3, 4]
            assert int(await store._client.get(total)) == 3 * size
            # the same id again: refused, the first kept and counted once
            assert await store.put("globex", "g4", STORED.to_bytes()) is PutOutcome.TAKEN
            assert int(await store._client.get(total)) == 3 * size
            assert await store.delete("globex", "g3") is True
            assert int(await store._client.get(total)) == 2 * size
            await store.put("globex", "g5", STORED.to_bytes())  # fits again: nothing goes
            assert [await store.get("globex", g) is not None for g in ("g2", "g4", "g5")] == [
                True
            ] * 3
            assert await store.get("acme", "a0") == STORED
        finally:
            await store._client.delete(*await store._client.keys(redis_prefix + "*"))
            await store.aclose()

    asyncio.run(main())


def test_memory_store_keeps_its_bytes_and_the_quieter_tenants_share() -> None:
    size = len(STORED.to_bytes())
    store = MemoryResponseStore(ttl_s=60, max_entries=100, max_bytes=3 * size)

    async def main() -> None:
        await store.put("acme", "a0", STORED.to_bytes())
        for n in range(5):
            await store.put("globex", f"g{n}", STORED.to_bytes())
        kept = [n for n in range(5) if await store.get("globex", f"g{n}") is not None]
        assert kept == [3, 4]  # three responses' bytes in all: acme's one stays
        assert await store.get("acme", "a0") == STORED

    asyncio.run(main())


def test_memory_store_expires_and_drops_the_oldest_past_its_bound() -> None:
    now = [1000.0]
    store = MemoryResponseStore(ttl_s=30, max_entries=2, clock=lambda: now[0])

    async def main() -> None:
        await store.put("acme", "a", STORED.to_bytes())
        now[0] += 10
        await store.put("acme", "b", STORED.to_bytes())
        now[0] += 10
        await store.put("acme", "c", STORED.to_bytes())  # over the bound: "a" goes
        assert await store.get("acme", "a") is None
        assert await store.get("acme", "b") == STORED
        now[0] += 25  # "b" was stored 35 s ago, "c" 25 s ago
        assert await store.get("acme", "b") is None
        assert await store.get("acme", "c") == STORED
        assert len(store) == 1

    asyncio.run(main())


def test_stored_response_round_trips_through_bytes() -> None:
    assert StoredResponse.from_bytes(STORED.to_bytes()) == STORED


# a stored response whose conversation is not JSON at all: reading its reply must not touch it
UNREADABLE = orjson.dumps(STORED.response) + b"\n" + b"[not json"
LONG = StoredResponse(ITEMS, {**STORED.response, "instructions": "x" * 100_000})
# a reply longer than the head a `GET` reads first (huge `instructions`), the same unread rest
LONG_UNREADABLE = orjson.dumps(LONG.response) + b"\n" + b"[not json" * 100_000
OLD_LAYOUT = orjson.dumps({"conversation": list(ITEMS), "response": STORED.response})


def test_memory_store_reads_a_reply_without_its_conversation() -> None:
    async def main() -> None:
        store = MemoryResponseStore(ttl_s=60, max_entries=10)
        await store.put("acme", "resp_1", STORED.to_bytes())
        store._entries[("acme", "resp_1")] = (store._entries[("acme", "resp_1")][0], UNREADABLE)
        assert await store.get_reply("acme", "resp_1") == orjson.dumps(STORED.response)
        with pytest.raises(orjson.JSONDecodeError):
            await store.get("acme", "resp_1")
        await store.put("acme", "long", LONG_UNREADABLE)
        assert await store.get_reply("acme", "long") == orjson.dumps(LONG.response)

    asyncio.run(main())


def test_redis_store_reads_a_reply_without_its_conversation(
    redis_url: str, redis_prefix: str
) -> None:
    """The first 64 KiB only: a reply, its conversation unread; a longer reply read whole,
    its conversation still unread (served as stored: neither is parsed); one stored as one
    object before this layout parsed whole."""

    async def main() -> None:
        store = RedisResponseStore.from_url(
            redis_url, ttl_s=60, max_entries=10, key_prefix=redis_prefix
        )
        key = f"{redis_prefix}{{acme}}:"
        try:
            await store._client.set(key + "resp_1", UNREADABLE + b" " * 1_000_000)
            assert await store.get_reply("acme", "resp_1") == orjson.dumps(STORED.response)
            with pytest.raises(orjson.JSONDecodeError):
                await store.get("acme", "resp_1")
            await store.put("acme", "long", LONG.to_bytes())
            assert await store.get_reply("acme", "long") == orjson.dumps(LONG.response)
            await store.put("acme", "long_unreadable", LONG_UNREADABLE)
            assert await store.get_reply("acme", "long_unreadable") == orjson.dumps(LONG.response)
            await store._client.set(key + "old", OLD_LAYOUT)
            assert await store.get_reply("acme", "old") == orjson.dumps(STORED.response)
            assert await store.get("acme", "old") == STORED
        finally:
            await store._client.delete(*await store._client.keys(redis_prefix + "*"))
            await store.aclose()

    asyncio.run(main())
