"""Each limit, on both stores, with exact values: admission, rejection, retry-after, refunds."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from quotas.errors import LimitNeverFits, QuotaExceeded, ReservationConflict
from quotas.limits import Actual, Ask, Limits, Settlement, ToolCallLimits, WindowUse
from quotas.memory import MemoryQuotaStore
from quotas.store import QuotaStore
from tests.quotas.conftest import StoreFactory

T0 = int(datetime(2026, 11, 10, 12, 0, tzinfo=UTC).timestamp() * 1000)
DEC_1 = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)


def run(factory: StoreFactory, body: Callable[[QuotaStore], Awaitable[None]]) -> None:
    async def main() -> None:
        store = factory()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


async def exceeded(
    store: QuotaStore, limits: Limits, ask: Ask, rid: str, now: int
) -> QuotaExceeded:
    with pytest.raises(QuotaExceeded) as info:
        await store.reserve("acme", limits, ask, reservation_id=rid, now_ms=now)
    return info.value


def test_tokens_per_minute(store_factory: StoreFactory) -> None:
    limits = Limits(tokens_per_minute=1000)

    async def body(store: QuotaStore) -> None:
        first = await store.reserve("acme", limits, Ask(600), reservation_id="a", now_ms=T0)
        assert first.window == WindowUse(600, 1, 60_000, 1000)
        err = await exceeded(store, limits, Ask(500), "b", T0 + 10_000)
        assert (err.limit, err.limit_value, err.current) == ("tokens_per_minute", 1000, 600)
        assert (err.retry_after_ms, err.retry_after_s) == (50_000, 50)
        assert err.window == WindowUse(600, 1, 50_000, 1000)
        settled = await store.settle(first, Actual(300), now_ms=T0 + 10_000)
        assert settled == Settlement("settled", 0, 0.0)
        second = await store.reserve(
            "acme", limits, Ask(500), reservation_id="b", now_ms=T0 + 10_000
        )
        assert second.window == WindowUse(800, 2, 60_000, 1000)
        # the first call leaves the window exactly 60 s after its admission
        usage = await store.usage("acme", limits, now_ms=T0 + 60_000)
        assert (usage.tokens_used, usage.requests_used, usage.reset_ms) == (500, 1, 10_000)
        # other tenants are not affected
        other = await store.reserve("zeta", limits, Ask(1000), reservation_id="a", now_ms=T0)
        assert other.window.tokens_used == 1000

    run(store_factory, body)


def test_prompt_above_the_cap_never_fits(store_factory: StoreFactory) -> None:
    limits = Limits(tokens_per_minute=1000, monthly_budget_usd=2.0)

    async def body(store: QuotaStore) -> None:
        with pytest.raises(LimitNeverFits) as info:
            await store.reserve("acme", limits, Ask(1001), reservation_id="a", now_ms=T0)
        assert (info.value.limit, info.value.limit_value, info.value.requested) == (
            "tokens_per_minute",
            1000,
            1001,
        )
        with pytest.raises(LimitNeverFits) as money:
            await store.reserve("acme", limits, Ask(10, 2.5), reservation_id="b", now_ms=T0)
        assert (money.value.limit, money.value.limit_value, money.value.requested) == (
            "monthly_budget_usd",
            2.0,
            2.5,
        )
        usage = await store.usage("acme", limits, now_ms=T0)
        assert (usage.tokens_used, usage.requests_used, usage.held_micro_usd) == (0, 0, 0)

    run(store_factory, body)


def test_requests_per_minute(store_factory: StoreFactory) -> None:
    limits = Limits(requests_per_minute=2)

    async def body(store: QuotaStore) -> None:
        await store.reserve("acme", limits, Ask(1), reservation_id="a", now_ms=T0)
        await store.reserve("acme", limits, Ask(1), reservation_id="b", now_ms=T0 + 1_000)
        err = await exceeded(store, limits, Ask(1), "c", T0 + 2_000)
        assert (err.limit, err.limit_value, err.current, err.retry_after_ms) == (
            "requests_per_minute",
            2,
            2,
            58_000,
        )
        third = await store.reserve("acme", limits, Ask(1), reservation_id="c", now_ms=T0 + 60_000)
        assert third.window.requests_used == 2

    run(store_factory, body)


def test_concurrent_requests(store_factory: StoreFactory) -> None:
    limits = Limits(concurrent_requests=2)

    async def body(store: QuotaStore) -> None:
        first = await store.reserve("acme", limits, Ask(5), reservation_id="a", now_ms=T0)
        await store.reserve("acme", limits, Ask(5), reservation_id="b", now_ms=T0)
        err = await exceeded(store, limits, Ask(5), "c", T0 + 5)
        assert (err.limit, err.limit_value, err.current, err.retry_after_s) == (
            "concurrent_requests",
            2,
            2,
            1,
        )
        await store.settle(first, Actual(5), now_ms=T0 + 6)
        await store.reserve("acme", limits, Ask(5), reservation_id="c", now_ms=T0 + 7)
        assert (await store.usage("acme", limits, now_ms=T0 + 8)).concurrent == 2

    run(store_factory, body)


def test_calls_per_session(store_factory: StoreFactory) -> None:
    limits = Limits(calls_per_session=2, session_ttl_ms=600_000)

    async def body(store: QuotaStore) -> None:
        for i, now in enumerate((T0, T0 + 100_000)):
            await store.reserve(
                "acme", limits, Ask(1, session_id="s1"), reservation_id=f"a{i}", now_ms=now
            )
        err = await exceeded(store, limits, Ask(1, session_id="s1"), "a2", T0 + 150_000)
        # the session expires 10 minutes after its last admitted call
        assert (err.limit, err.limit_value, err.current, err.retry_after_ms) == (
            "calls_per_session",
            2,
            2,
            550_000,
        )
        await store.reserve(
            "acme", limits, Ask(1, session_id="s2"), reservation_id="b", now_ms=T0 + 150_000
        )
        await store.reserve("acme", limits, Ask(1), reservation_id="c", now_ms=T0 + 150_000)
        usage = await store.usage("acme", limits, now_ms=T0 + 150_000, session_id="s1")
        assert usage.session_calls == 2
        await store.reserve(
            "acme", limits, Ask(1, session_id="s1"), reservation_id="a3", now_ms=T0 + 700_000
        )

    run(store_factory, body)


def test_monthly_budget_holds_and_refunds(store_factory: StoreFactory) -> None:
    limits = Limits(monthly_budget_usd=1.0)

    async def body(store: QuotaStore) -> None:
        first = await store.reserve("acme", limits, Ask(10, 0.6), reservation_id="a", now_ms=T0)
        err = await exceeded(store, limits, Ask(10, 0.5), "b", T0 + 1_000)
        assert (err.limit, err.limit_value, err.current) == ("monthly_budget_usd", 1.0, 0.6)
        assert err.retry_after_ms == DEC_1 - T0 - 1_000
        settled = await store.settle(first, Actual(10, 0.25), now_ms=T0 + 2_000)
        assert settled == Settlement("settled", 0, 0.25)
        await store.reserve("acme", limits, Ask(10, 0.5), reservation_id="b", now_ms=T0 + 3_000)
        usage = await store.usage("acme", limits, now_ms=T0 + 3_000)
        assert (usage.period, usage.spend_micro_usd, usage.held_micro_usd) == (
            "2026-11",
            250_000,
            500_000,
        )
        # "b" is never settled: its lease (15 min) expires and its hold is spent
        late = await store.reserve(
            "acme", limits, Ask(10, 0.1), reservation_id="c", now_ms=DEC_1 - 1
        )
        usage = await store.usage("acme", limits, now_ms=DEC_1 - 1)
        assert (usage.spend_micro_usd, usage.held_micro_usd) == (750_000, 100_000)
        # a new month starts with nothing spent; a November hold settles into November
        december = await store.reserve(
            "acme", limits, Ask(10, 0.9), reservation_id="d", now_ms=DEC_1
        )
        assert december.period == "2026-12"
        assert await store.settle(late, Actual(10, 0.05), now_ms=DEC_1 + 1) == Settlement(
            "settled", 0, 0.8
        )
        usage = await store.usage("acme", limits, now_ms=DEC_1 + 1)
        assert (usage.period, usage.spend_micro_usd, usage.held_micro_usd) == (
            "2026-12",
            0,
            900_000,
        )

    run(store_factory, body)


def test_longest_wait_names_the_limit(store_factory: StoreFactory) -> None:
    limits = Limits(tokens_per_minute=100, monthly_budget_usd=1.0)

    async def body(store: QuotaStore) -> None:
        await store.reserve("acme", limits, Ask(80, 0.8), reservation_id="a", now_ms=T0)
        err = await exceeded(store, limits, Ask(30, 0.3), "b", T0)
        assert (err.limit, err.current) == ("monthly_budget_usd", 0.8)
        assert err.window == WindowUse(80, 1, 60_000, 100)

    run(store_factory, body)


def test_expired_lease_frees_the_slot_and_charges_the_hold(store_factory: StoreFactory) -> None:
    limits = Limits(tokens_per_minute=1000, concurrent_requests=1, lease_ms=30_000)

    async def body(store: QuotaStore) -> None:
        lost = await store.reserve("acme", limits, Ask(400, 0.2), reservation_id="a", now_ms=T0)
        assert lost.lease_expiry_ms == T0 + 30_000
        await exceeded(store, limits, Ask(400), "b", T0 + 29_999)
        await store.reserve("acme", limits, Ask(400), reservation_id="b", now_ms=T0 + 30_000)
        usage = await store.usage("acme", limits, now_ms=T0 + 30_000)
        # conservative: the dead call's tokens stay counted and its dollars are spent
        assert (usage.tokens_used, usage.concurrent, usage.spend_micro_usd) == (800, 1, 200_000)
        late = await store.settle(lost, Actual(100, 0.05), now_ms=T0 + 31_000)
        assert late == Settlement("late", 0, 0.05)
        usage = await store.usage("acme", limits, now_ms=T0 + 31_000)
        assert (usage.tokens_used, usage.spend_micro_usd) == (500, 50_000)

    run(store_factory, body)


def test_settle_is_idempotent_and_counts_overruns(store_factory: StoreFactory) -> None:
    limits = Limits(tokens_per_minute=1000)

    async def body(store: QuotaStore) -> None:
        ticket = await store.reserve("acme", limits, Ask(100, 0.01), reservation_id="a", now_ms=T0)
        assert await store.settle(ticket, Actual(130, 0.02), now_ms=T0 + 1) == Settlement(
            "settled", 30, 0.02
        )
        assert await store.settle(ticket, Actual(1, 0.0), now_ms=T0 + 2) == Settlement(
            "duplicate", 0, 0.02
        )
        assert (await store.usage("acme", limits, now_ms=T0 + 3)).tokens_used == 130
        # once out of the window the record is dropped: a settle changes nothing
        assert await store.settle(ticket, Actual(1, 0.0), now_ms=T0 + 61_000) == Settlement(
            "duplicate", 0, 0.02
        )
        await store.usage("acme", limits, now_ms=T0 + 61_000)
        assert await store.settle(ticket, Actual(1, 0.0), now_ms=T0 + 61_000) == Settlement(
            "unknown", 0, 0.02
        )

    run(store_factory, body)


def test_clock_never_goes_back_and_ids_are_unique(store_factory: StoreFactory) -> None:
    limits = Limits(requests_per_minute=10)

    async def body(store: QuotaStore) -> None:
        await store.reserve("acme", limits, Ask(1), reservation_id="a", now_ms=T0 + 10_000)
        lagging = await store.reserve("acme", limits, Ask(1), reservation_id="b", now_ms=T0)
        assert lagging.admitted_ms == T0 + 10_000
        with pytest.raises(ReservationConflict):
            await store.reserve("acme", limits, Ask(1), reservation_id="a", now_ms=T0 + 11_000)

    run(store_factory, body)


def test_seed_spend_raises_never_lowers(store_factory: StoreFactory) -> None:
    limits = Limits(monthly_budget_usd=10.0)

    async def body(store: QuotaStore) -> None:
        await store.seed_spend("acme", "2026-11", 4_000_000, now_ms=T0)
        await store.seed_spend("acme", "2026-11", 1_000_000, now_ms=T0)
        usage = await store.usage("acme", limits, now_ms=T0)
        assert usage.spend_micro_usd == 4_000_000
        err = await exceeded(store, limits, Ask(1, 6.5), "a", T0)
        assert (err.limit, err.current) == ("monthly_budget_usd", 4.0)

    run(store_factory, body)


def test_budget_period_span_bounds_the_month_of_now() -> None:
    from quotas.limits import budget_period, budget_period_span

    nov_1 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)
    dec_1 = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
    jan_1 = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert budget_period_span(nov_1) == ("2026-11", nov_1, dec_1)
    assert budget_period_span(dec_1 - 1) == ("2026-11", nov_1, dec_1)
    assert budget_period_span(dec_1) == ("2026-12", dec_1, jan_1)
    assert budget_period_span(jan_1 - 1) == ("2026-12", dec_1, jan_1)
    for now in (nov_1, nov_1 + 1, dec_1 - 1, dec_1, jan_1 - 1, jan_1):
        name, start, end = budget_period_span(now)
        assert start <= now < end and budget_period(now) == (name, end)


def test_fresh_session_ids_keep_a_tenants_session_table_bounded() -> None:
    """acme names a new session on every model and tool call: the process keeps at most its cap
    of acme's sessions (the latest among them still counted), and globex's session count is
    untouched."""
    limits = Limits(calls_per_session=2)
    tools = ToolCallLimits(calls_per_session=2)

    async def main() -> None:
        store = MemoryQuotaStore(max_sessions_per_tenant=2048)
        for i in range(2):
            await store.reserve("globex", limits, Ask(1, 0, "s"), reservation_id=f"g{i}", now_ms=T0)
        for i in range(3000):
            ask = Ask(1, 0, f"model-{i}")
            await store.reserve("acme", limits, ask, reservation_id=f"a{i}", now_ms=T0 + i)
            await store.admit_tool_call(
                "acme", tools, call_id=f"t{i}", session_id=f"tool-{i}", now_ms=T0 + i
            )
            assert len(store._books["acme"].sessions) <= 2048
        latest = await store.usage("acme", limits, now_ms=T0 + 3000, session_id="model-2999")
        assert latest.session_calls == 1
        with pytest.raises(QuotaExceeded) as refused:
            await store.reserve("globex", limits, Ask(1, 0, "s"), reservation_id="g2", now_ms=T0)
        assert (refused.value.limit, refused.value.current) == ("calls_per_session", 2)

    asyncio.run(main())
