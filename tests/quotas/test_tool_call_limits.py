"""MCP tool calls' limits on both stores, with exact values: the per-minute window, the
concurrency leases, and `calls_per_session` counted on the very counter model calls use."""

from __future__ import annotations

import asyncio

import pytest

from quotas.errors import QuotaExceeded, QuotaStoreUnavailable
from quotas.failover import FailoverQuotaStore
from quotas.limits import Ask, Limits, ToolCallLease, ToolCallLimits
from quotas.memory import MemoryQuotaStore
from quotas.store import QuotaStore
from tests.quotas.conftest import StoreFactory, SwitchableStore
from tests.quotas.test_quota_limits import T0, run


async def refused(
    store: QuotaStore, limits: ToolCallLimits, call_id: str, now: int, session: str | None = None
) -> tuple[str, float, float, int]:
    with pytest.raises(QuotaExceeded) as info:
        await store.admit_tool_call("acme", limits, call_id=call_id, session_id=session, now_ms=now)
    err = info.value
    return err.limit, err.limit_value, err.current, err.retry_after_ms


async def admit(
    store: QuotaStore, limits: ToolCallLimits, call_id: str, now: int, session: str | None = None
) -> ToolCallLease:
    return await store.admit_tool_call(
        "acme", limits, call_id=call_id, session_id=session, now_ms=now
    )


def test_tool_calls_per_minute(store_factory: StoreFactory) -> None:
    limits = ToolCallLimits(per_minute=2)

    async def body(store: QuotaStore) -> None:
        await admit(store, limits, "a", T0)
        await admit(store, limits, "b", T0 + 15_000)
        assert await refused(store, limits, "c", T0 + 20_000) == (
            "tool_calls_per_minute",
            2,
            2,
            40_000,
        )
        await admit(store, limits, "c", T0 + 60_000)  # the first left the window
        assert await refused(store, limits, "d", T0 + 60_000) == (
            "tool_calls_per_minute",
            2,
            2,
            15_000,
        )
        other = await store.admit_tool_call(
            "zeta", limits, call_id="a", session_id=None, now_ms=T0 + 60_000
        )
        assert other == ToolCallLease("a", "zeta", store.name)  # type: ignore[arg-type]

    run(store_factory, body)


def test_concurrent_tool_calls_free_on_end_or_lease_expiry(store_factory: StoreFactory) -> None:
    limits = ToolCallLimits(concurrent=1, lease_ms=5_000)

    async def body(store: QuotaStore) -> None:
        first = await admit(store, limits, "a", T0)
        assert await refused(store, limits, "b", T0 + 1) == ("concurrent_tool_calls", 1, 1, 1_000)
        await store.end_tool_call(first, now_ms=T0 + 2)
        await store.end_tool_call(first, now_ms=T0 + 2)  # idempotent
        await admit(store, limits, "b", T0 + 3)  # held, never ended: its process died
        assert (await refused(store, limits, "c", T0 + 4))[0] == "concurrent_tool_calls"
        await admit(store, limits, "c", T0 + 5_003)

    run(store_factory, body)


def test_a_session_counts_model_and_tool_calls_together(store_factory: StoreFactory) -> None:
    model = Limits(calls_per_session=3, session_ttl_ms=90_000)
    tools = ToolCallLimits(calls_per_session=3, session_ttl_ms=90_000)

    async def body(store: QuotaStore) -> None:
        await store.reserve("acme", model, Ask(1, 0, "s1"), reservation_id="m1", now_ms=T0)
        await admit(store, tools, "t1", T0 + 1_000, session="s1")
        await admit(store, tools, "t2", T0 + 2_000, session="s2")  # another session
        await store.reserve("acme", model, Ask(1, 0, "s1"), reservation_id="m2", now_ms=T0 + 3_000)
        assert await refused(store, tools, "t3", T0 + 4_000, "s1") == (
            "calls_per_session",
            3,
            3,
            89_000,
        )
        with pytest.raises(QuotaExceeded) as info:
            await store.reserve(
                "acme", model, Ask(1, 0, "s1"), reservation_id="m3", now_ms=T0 + 4_000
            )
        assert (info.value.limit, info.value.current) == ("calls_per_session", 3)
        usage = await store.usage("acme", model, now_ms=T0 + 4_000, session_id="s1")
        assert usage.session_calls == 3
        await admit(store, tools, "t4", T0 + 4_000)  # a call naming no session is not counted
        # a session idle past its ttl starts again
        await admit(store, tools, "t5", T0 + 3_000 + 90_000, session="s1")

    run(store_factory, body)


@pytest.mark.redis
def test_two_redis_stores_share_tool_limits(redis_store_factory: StoreFactory) -> None:
    """Two gateway processes (two stores on one Redis) count one tenant's calls together."""
    limits = ToolCallLimits(per_minute=3, concurrent=2)

    async def main() -> None:
        one, two = redis_store_factory(), redis_store_factory()
        try:
            held = await admit(one, limits, "a", T0)
            await admit(two, limits, "b", T0 + 1)
            assert await refused(one, limits, "c", T0 + 2) == ("concurrent_tool_calls", 2, 2, 1_000)
            await two.end_tool_call(held, now_ms=T0 + 3)  # ended by the other process
            await admit(one, limits, "c", T0 + 4)
            assert (await refused(two, limits, "d", T0 + 5))[:3] == ("tool_calls_per_minute", 3, 3)
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


def test_a_shared_store_down_follows_the_tenants_rates_policy() -> None:
    async def main() -> None:
        shared = SwitchableStore()
        store = FailoverQuotaStore(shared, MemoryQuotaStore())
        shared.is_down = True
        lease = await admit(store, ToolCallLimits(per_minute=5), "a", T0)
        assert lease.store == "memory"
        await store.end_tool_call(lease, now_ms=T0)
        with pytest.raises(QuotaStoreUnavailable):
            await admit(
                store, ToolCallLimits(per_minute=5, on_store_down="fail_closed"), "b", T0 + 2_000
            )

    asyncio.run(main())
