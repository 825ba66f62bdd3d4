"""Every key the Redis store writes carries a TTL, and one tenant's keys share a cluster slot."""

from __future__ import annotations

import asyncio

import pytest
import redis

from quotas.limits import Actual, Ask, Limits
from quotas.redis_store import RedisQuotaStore
from tests.quotas.test_quota_limits import T0


@pytest.mark.redis
def test_every_key_has_a_ttl_and_one_hash_tag(redis_url: str, redis_prefix: str) -> None:
    limits = Limits(
        tokens_per_minute=1000, concurrent_requests=1, calls_per_session=5, monthly_budget_usd=1.0
    )

    async def main() -> None:
        store = RedisQuotaStore.from_url(redis_url, key_prefix=redis_prefix)
        try:
            held = await store.reserve(
                "acme", limits, Ask(10, 0.1, "s1"), reservation_id="a", now_ms=T0
            )
            await store.settle(held, Actual(5, 0.05), now_ms=T0 + 1)
            await store.reserve(
                "acme", limits, Ask(10, 0.1, "s1"), reservation_id="b", now_ms=T0 + 2
            )
            await store.seed_spend("zeta", "2026-11", 5, now_ms=T0)
            await store.usage("omega", limits, now_ms=T0, session_id="s9")
        finally:
            await store.close()

    asyncio.run(main())
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = sorted(client.scan_iter(match=redis_prefix + "*"))
        suffixes = [key.removeprefix(redis_prefix) for key in keys]
        assert suffixes == [
            "{acme}:active",
            "{acme}:budget",
            "{acme}:meta",
            "{acme}:res",
            "{acme}:sess:s1",
            "{acme}:win",
            "{acme}:wtok",
            "{omega}:meta",
            "{zeta}:budget",
        ]
        assert all(client.pttl(key) > 0 for key in keys)
    finally:
        client.delete(*keys)
        client.close()
