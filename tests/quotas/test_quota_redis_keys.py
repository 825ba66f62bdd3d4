"""Every key the Redis store writes carries a TTL, one tenant's keys share a cluster slot, and
one tenant's fresh session ids cannot grow Redis without bound."""

from __future__ import annotations

import asyncio

import pytest
import redis

from quotas.errors import QuotaExceeded
from quotas.limits import Actual, Ask, Limits, ToolCallLimits
from quotas.redis_store import RedisQuotaStore
from tests.quotas.conftest import delete_prefix
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
            "{acme}:sessions",
            "{acme}:win",
            "{acme}:wtok",
            "{omega}:meta",
            "{zeta}:budget",
        ]
        assert all(client.pttl(key) > 0 for key in keys)
    finally:
        client.delete(*keys)
        client.close()


@pytest.mark.redis
def test_fresh_session_ids_keep_a_tenants_sessions_in_redis_bounded(
    redis_url: str, redis_prefix: str
) -> None:
    """acme names a new session on every model and tool call: Redis keeps at most the cap of
    acme's session counts (the latest still counted), and globex's count is untouched."""
    limits = Limits(calls_per_session=2)
    tools = ToolCallLimits(calls_per_session=2)

    async def main() -> None:
        store = RedisQuotaStore.from_url(
            redis_url, key_prefix=redis_prefix, max_sessions_per_tenant=50
        )
        for i in range(2):
            await store.reserve("globex", limits, Ask(1, 0, "s"), reservation_id=f"g{i}", now_ms=T0)
        for i in range(60):
            ask = Ask(1, 0, f"model-{i}")
            await store.reserve("acme", limits, ask, reservation_id=f"a{i}", now_ms=T0 + i)
            await store.admit_tool_call(
                "acme", tools, call_id=f"t{i}", session_id=f"tool-{i}", now_ms=T0 + i
            )
        latest = await store.usage("acme", limits, now_ms=T0 + 60, session_id="model-59")
        assert latest.session_calls == 1
        with pytest.raises(QuotaExceeded) as refused:
            await store.reserve("globex", limits, Ask(1, 0, "s"), reservation_id="g2", now_ms=T0)
        assert (refused.value.limit, refused.value.current) == ("calls_per_session", 2)
        await store.close()

    try:
        asyncio.run(main())
        client = redis.Redis.from_url(redis_url)
        sessions = list(client.scan_iter(match=redis_prefix + "{acme}:sess:*"))
        client.close()
        assert len(sessions) == 50
    finally:
        delete_prefix(redis_url, redis_prefix)
