"""Gateway processes whose clocks disagree share one Redis: a process an hour ahead must not move
a tenant's clock (and with it every other process's window and leases) an hour ahead."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from quotas.errors import QuotaExceeded
from quotas.limits import Actual, Ask, Limits, ToolCallLimits
from quotas.lua import MAX_CLOCK_LEAD_MS
from tests.quotas.conftest import StoreFactory

HOUR_MS = 3_600_000
LIMITS = Limits(requests_per_minute=3, concurrent_requests=3, lease_ms=30_000)
TOOLS = ToolCallLimits(per_minute=5, concurrent=2, lease_ms=30_000)


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.redis
def test_a_process_an_hour_ahead_leaves_the_others_window_and_leases(
    redis_store_factory: StoreFactory,
) -> None:
    async def main() -> None:
        honest, skewed = redis_store_factory(), redis_store_factory()
        started = now_ms()
        held = await honest.reserve("acme", LIMITS, Ask(10), reservation_id="h1", now_ms=started)
        ahead = await skewed.reserve(
            "acme", LIMITS, Ask(10), reservation_id="s1", now_ms=now_ms() + HOUR_MS
        )
        assert started <= ahead.admitted_ms <= now_ms() + MAX_CLOCK_LEAD_MS
        # the honest process's lease is still live, its call still in the window
        usage = await honest.usage("acme", LIMITS, now_ms=now_ms())
        assert (usage.concurrent, usage.requests_used) == (2, 2)
        assert usage.now_ms <= now_ms() + MAX_CLOCK_LEAD_MS
        assert 0 < usage.reset_ms <= LIMITS.window_ms + MAX_CLOCK_LEAD_MS
        settled = await honest.settle(held, Actual(10), now_ms=now_ms())
        assert settled.status == "settled"  # not "late": the lease did not expire an hour early
        third = await honest.reserve("acme", LIMITS, Ask(10), reservation_id="h2", now_ms=now_ms())
        assert third.admitted_ms <= now_ms() + MAX_CLOCK_LEAD_MS
        with pytest.raises(QuotaExceeded) as refused:
            await honest.reserve("acme", LIMITS, Ask(10), reservation_id="h3", now_ms=now_ms())
        assert (refused.value.limit, refused.value.current) == ("requests_per_minute", 3)
        assert refused.value.retry_after_ms <= LIMITS.window_ms + MAX_CLOCK_LEAD_MS
        await honest.close()
        await skewed.close()

    asyncio.run(main())


@pytest.mark.redis
def test_a_process_an_hour_ahead_frees_no_tool_slot_of_the_others(
    redis_store_factory: StoreFactory,
) -> None:
    async def main() -> None:
        honest, skewed = redis_store_factory(), redis_store_factory()
        await honest.admit_tool_call("acme", TOOLS, call_id="t1", session_id=None, now_ms=now_ms())
        await skewed.admit_tool_call(
            "acme", TOOLS, call_id="t2", session_id=None, now_ms=now_ms() + HOUR_MS
        )
        with pytest.raises(QuotaExceeded) as refused:  # t1 still runs: its lease did not end
            await honest.admit_tool_call(
                "acme", TOOLS, call_id="t3", session_id=None, now_ms=now_ms()
            )
        assert (refused.value.limit, refused.value.current) == ("concurrent_tool_calls", 2)
        await honest.close()
        await skewed.close()

    asyncio.run(main())


@pytest.mark.redis
def test_a_tenant_clock_stored_in_the_future_is_pulled_back(
    redis_store_factory: StoreFactory, redis_url: str, redis_prefix: str
) -> None:
    """A clock a skewed process wrote before the bound existed stops ruling the others."""
    client = redis.Redis.from_url(redis_url)
    client.hset(f"{redis_prefix}{{acme}}:meta", "clock", str(now_ms() + HOUR_MS))
    client.close()

    async def main() -> None:
        store = redis_store_factory()
        held = await store.reserve("acme", LIMITS, Ask(10), reservation_id="a", now_ms=now_ms())
        assert held.admitted_ms <= now_ms() + MAX_CLOCK_LEAD_MS
        assert held.lease_expiry_ms <= now_ms() + MAX_CLOCK_LEAD_MS + LIMITS.lease_ms
        await store.close()

    asyncio.run(main())
