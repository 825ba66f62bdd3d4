"""Fixtures for the quota tests: each store kind, the Redis one on its own key prefix."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore

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
