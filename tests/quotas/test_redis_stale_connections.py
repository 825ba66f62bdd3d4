"""A Redis restart leaves every pooled connection stale: each is retried once on a fresh
connection instead of failing its call. A TCP proxy the test controls drops every connection
(the restart, as the client sees it); the shared Redis itself is never restarted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from quotas.errors import QuotaStoreUnavailable
from quotas.failover import FailoverQuotaStore, must_fail_closed
from quotas.limits import Actual, Ask, Limits
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from tests.fakes.tcp_cut import TcpCut
from tests.quotas.conftest import delete_prefix

pytestmark = pytest.mark.redis
T0 = int(datetime(2026, 11, 10, 12, 0, tzinfo=UTC).timestamp() * 1000)
CLOSED = Limits(tokens_per_minute=1_000_000, on_store_down_rates="fail_closed")
NUM_CONNECTIONS = 10


@pytest.fixture
def proxied_redis(redis_url: str, redis_prefix: str) -> Iterator[tuple[TcpCut, str]]:
    url = redis.connection.parse_url(redis_url)
    proxy = TcpCut((url.get("host", "127.0.0.1"), int(url.get("port", 6379))))
    proxy.restore()
    yield proxy, f"redis://127.0.0.1:{proxy.port}/{url.get('db', 0)}"
    proxy.cut()
    delete_prefix(redis_url, redis_prefix)


async def burst(store: FailoverQuotaStore, first_id: int, now_ms: int) -> list[str]:
    """NUM_CONNECTIONS reserve+settle pairs at once: each holds its own pooled connection."""

    async def one(n: int) -> str:
        try:
            held = await store.reserve(
                "acme", CLOSED, Ask(10), reservation_id=f"r{n}", now_ms=now_ms
            )
            await store.settle(held, Actual(10), now_ms=now_ms + 1)
        except QuotaStoreUnavailable:
            return "503"
        return held.store

    return list(await asyncio.gather(*(one(first_id + n) for n in range(NUM_CONNECTIONS))))


def test_a_dropped_connection_pool_fails_no_call_of_a_fail_closed_tenant(
    proxied_redis: tuple[TcpCut, str], redis_prefix: str
) -> None:
    proxy, url = proxied_redis
    assert must_fail_closed(CLOSED)

    async def main() -> None:
        shared = RedisQuotaStore.from_url(url, key_prefix=redis_prefix)
        store = FailoverQuotaStore(shared, MemoryQuotaStore())
        assert await burst(store, 0, T0) == ["redis"] * NUM_CONNECTIONS  # the pool is warm
        proxy.cut()  # every pooled connection is now dead: what a Redis restart does to them
        proxy.restore()
        assert await burst(store, 100, T0 + 10) == ["redis"] * NUM_CONNECTIONS
        assert not store.is_primary_down
        usage = await shared.usage("acme", CLOSED, now_ms=T0 + 20)
        assert (usage.tokens_used, usage.concurrent) == (20 * 10, 0)  # each call counted once
        await store.close()

    asyncio.run(main())


def test_a_redis_that_stays_down_still_fails_closed(
    proxied_redis: tuple[TcpCut, str], redis_prefix: str
) -> None:
    proxy, url = proxied_redis

    async def main() -> None:
        store = FailoverQuotaStore(
            RedisQuotaStore.from_url(url, key_prefix=redis_prefix, timeout_s=2.0),
            MemoryQuotaStore(),
        )
        assert await burst(store, 0, T0) == ["redis"] * NUM_CONNECTIONS
        proxy.cut()  # and not restored: the retry meets a refused connection
        assert await burst(store, 100, T0 + 10) == ["503"] * NUM_CONNECTIONS
        await store.close()

    asyncio.run(main())
