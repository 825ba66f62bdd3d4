"""A call that used nothing (refused downstream, cancelled before its upstream, failed with
nothing produced) is taken back off its session's `calls_per_session` count, on both stores."""

from __future__ import annotations

import asyncio

import pytest

from adapters.types import Usage
from quotas.errors import QuotaExceeded
from quotas.limits import Actual, Ask, Limits, ToolCallLimits
from quotas.store import QuotaStore
from tests.quotas.conftest import StoreFactory
from tests.quotas.test_admission import T0_S, build, tenant
from tests.quotas.test_quota_limits import T0, exceeded, run

LIMITS = Limits(calls_per_session=2, session_ttl_ms=10_000)


async def session_calls(store: QuotaStore, now: int) -> int:
    return (await store.usage("acme", LIMITS, now_ms=now, session_id="s1")).session_calls


def test_a_call_settled_at_nothing_leaves_the_session_count(store_factory: StoreFactory) -> None:
    async def body(store: QuotaStore) -> None:
        ask = Ask(10, 0.0, "s1")
        cancelled = await store.reserve("acme", LIMITS, ask, reservation_id="a", now_ms=T0)
        assert cancelled.session_id == "s1"
        settled = await store.settle(cancelled, Actual(0), now_ms=T0 + 1)
        assert settled.status == "settled"
        assert await session_calls(store, T0 + 1) == 0
        again = await store.settle(cancelled, Actual(0), now_ms=T0 + 2)  # no second refund
        assert again.status == "duplicate"
        served = await store.reserve("acme", LIMITS, ask, reservation_id="b", now_ms=T0 + 3)
        await store.settle(served, Actual(12), now_ms=T0 + 4)  # used: stays counted
        await store.reserve("acme", LIMITS, ask, reservation_id="c", now_ms=T0 + 5)
        assert await session_calls(store, T0 + 5) == 2
        err = await exceeded(store, LIMITS, ask, "d", T0 + 6)
        assert (err.limit, err.current, err.retry_after_ms) == ("calls_per_session", 2, 9_999)

    run(store_factory, body)


def test_a_late_refund_never_takes_a_call_of_the_sessions_next_run(
    store_factory: StoreFactory,
) -> None:
    """The session idled past its TTL and started counting again: a call admitted in its
    earlier run and settled at nothing now leaves the new run's count as it is."""

    async def body(store: QuotaStore) -> None:
        ask = Ask(10, 0.0, "s1")
        old = await store.reserve("acme", LIMITS, ask, reservation_id="a", now_ms=T0)
        await store.reserve("acme", LIMITS, ask, reservation_id="b", now_ms=T0 + 20_000)
        await store.settle(old, Actual(0), now_ms=T0 + 20_001)
        assert await session_calls(store, T0 + 20_001) == 1

    run(store_factory, body)


def test_tool_calls_and_given_back_model_calls_share_the_count(
    store_factory: StoreFactory,
) -> None:
    tools = ToolCallLimits(calls_per_session=2, session_ttl_ms=10_000)

    async def body(store: QuotaStore) -> None:
        ask = Ask(10, 0.0, "s1")
        await store.admit_tool_call("acme", tools, call_id="t1", session_id="s1", now_ms=T0)
        gone = await store.reserve("acme", LIMITS, ask, reservation_id="a", now_ms=T0 + 1)
        await store.settle(gone, Actual(0), now_ms=T0 + 2)
        await store.admit_tool_call("acme", tools, call_id="t2", session_id="s1", now_ms=T0 + 3)
        with pytest.raises(QuotaExceeded) as refused:
            await store.admit_tool_call("acme", tools, call_id="t3", session_id="s1", now_ms=T0 + 4)
        assert (refused.value.limit, refused.value.current) == ("calls_per_session", 2)

    run(store_factory, body)


def test_admission_gives_a_refused_downstream_call_back_to_its_session() -> None:
    """What the pipeline does when routing refuses or the client leaves before the upstream is
    called: settle at nothing. The session's next two calls are admitted, the third refused."""
    acme = tenant(calls_per_session=2)

    async def reserve() -> object:
        return await admission.reserve(
            acme, session_id="s1", prompt_tokens=5, max_output_tokens=5, worst_case_usd=0.0
        )

    async def main() -> None:
        ticket = await reserve()
        await admission.settle(ticket, usage=Usage(), cost_usd=0.0)
        await admission.settle(await reserve(), usage=Usage(5, 3), cost_usd=0.0)
        await reserve()
        with pytest.raises(QuotaExceeded) as refused:
            await reserve()
        assert (refused.value.limit, refused.value.current) == ("calls_per_session", 2)
        usage = await admission.store.usage(
            "acme", LIMITS, now_ms=int(T0_S * 1000), session_id="s1"
        )
        assert usage.session_calls == 2

    admission, _, _ = build()
    asyncio.run(main())
