"""Redis down (or answering with a refusal): fail open to the process store for rates, fail
closed for budgets, deferred settles replayed once it answers again, and nothing counted twice."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
import redis

from quotas.errors import QuotaStoreUnavailable, ReservationConflict
from quotas.failover import FailoverQuotaStore, must_fail_closed
from quotas.limits import (
    Actual,
    Ask,
    Limits,
    Reservation,
    Settlement,
    ToolCallLease,
    ToolCallLimits,
)
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from tests.quotas.conftest import OwnRedis, SwitchableStore

T0 = int(datetime(2026, 11, 10, 12, 0, tzinfo=UTC).timestamp() * 1000)
RATES = Limits(tokens_per_minute=1000)
BUDGET = Limits(tokens_per_minute=1000, monthly_budget_usd=5.0)
CLOSED_RATES = Limits(tokens_per_minute=1000, on_store_down_rates="fail_closed")
OPEN_BUDGET = Limits(monthly_budget_usd=5.0, on_store_down_budget="fail_open")


def build() -> tuple[FailoverQuotaStore, SwitchableStore, MemoryQuotaStore, list[tuple[bool, str]]]:
    shared, local = SwitchableStore(), MemoryQuotaStore()
    changes: list[tuple[bool, str]] = []
    store = FailoverQuotaStore(
        shared, local, probe_interval_ms=1_000, on_change=lambda d, r: changes.append((d, r))
    )
    return store, shared, local, changes


def test_which_policies_fail_closed() -> None:
    assert must_fail_closed(BUDGET)
    assert must_fail_closed(CLOSED_RATES)
    assert not must_fail_closed(RATES)
    assert not must_fail_closed(OPEN_BUDGET)
    assert not must_fail_closed(Limits(on_store_down_rates="fail_closed"))


def test_rates_fail_open_and_budgets_fail_closed() -> None:
    async def main() -> None:
        store, shared, local, changes = build()
        before = await store.reserve("acme", RATES, Ask(400), reservation_id="a", now_ms=T0)
        assert before.store == "redis"
        shared.is_down = True
        during = await store.reserve("acme", RATES, Ask(300), reservation_id="b", now_ms=T0 + 10)
        assert during.store == "memory"
        assert changes == [(True, "ConnectionError")]
        assert await store.settle(during, Actual(100), now_ms=T0 + 20) == Settlement(
            "settled", 0, 0.0
        )
        assert (await local.usage("acme", RATES, now_ms=T0 + 20)).tokens_used == 100
        assert (await shared.inner.usage("acme", RATES, now_ms=T0 + 20)).tokens_used == 400
        for limits in (BUDGET, CLOSED_RATES):
            with pytest.raises(QuotaStoreUnavailable):
                await store.reserve("zeta", limits, Ask(1), reservation_id="c", now_ms=T0 + 30)
        opened = await store.reserve(
            "zeta", OPEN_BUDGET, Ask(1, 1.0), reservation_id="d", now_ms=T0 + 30
        )
        assert opened.store == "memory"

    asyncio.run(main())


def test_an_outage_costs_one_try_per_probe_interval() -> None:
    async def main() -> None:
        store, shared, _, changes = build()
        shared.is_down = True
        stores = []
        for i, now in enumerate((T0, T0 + 500, T0 + 1_000, T0 + 1_500, T0 + 2_000)):
            if now == T0 + 1_500:
                shared.is_down = False
            held = await store.reserve("acme", RATES, Ask(1), reservation_id=f"r{i}", now_ms=now)
            stores.append((held.store, shared.calls))
        assert stores == [
            ("memory", 1),
            ("memory", 1),
            ("memory", 2),
            ("memory", 2),
            ("redis", 4),  # the give-back of the reserve that failed first, then the reserve
        ]
        assert changes == [(True, "ConnectionError"), (False, "answering again")]
        assert not store.is_primary_down

    asyncio.run(main())


def test_deferred_settles_replay_once() -> None:
    async def main() -> None:
        store, shared, _, _ = build()
        limits = Limits(tokens_per_minute=1000, monthly_budget_usd=5.0)
        held = await store.reserve("acme", limits, Ask(500, 1.0), reservation_id="a", now_ms=T0)
        shared.is_down = True
        deferred = await store.settle(held, Actual(200, 0.4), now_ms=T0 + 10)
        assert deferred == Settlement("deferred", 0, None)
        assert store.num_pending_settles == 1
        shared.is_down = False
        # the next call after the probe interval reaches Redis and replays the settle first
        await store.reserve("acme", limits, Ask(100, 0.5), reservation_id="b", now_ms=T0 + 1_010)
        assert store.num_pending_settles == 0
        usage = await shared.inner.usage("acme", limits, now_ms=T0 + 1_010)
        assert (usage.tokens_used, usage.spend_micro_usd, usage.held_micro_usd) == (
            300,
            400_000,
            500_000,
        )
        # a second delivery of the same settle changes nothing
        assert await store.settle(held, Actual(200, 0.4), now_ms=T0 + 1_020) == Settlement(
            "duplicate", 0, 0.4
        )

    asyncio.run(main())


@pytest.mark.redis
def test_a_redis_out_of_memory_is_an_outage_not_an_error(own_redis: OwnRedis) -> None:
    """A Redis at its `maxmemory` refuses the reserve script (`OOM ...`): each tenant fails open
    or closed as its policy says (not a 500 for every call), and the tenants' calls go back to
    Redis once it takes writes again."""
    admin = redis.Redis(port=own_redis.port)

    async def main() -> None:
        shared = RedisQuotaStore.from_url(own_redis.url)
        store = FailoverQuotaStore(shared, MemoryQuotaStore(), probe_interval_ms=1_000)
        held = await store.reserve("acme", BUDGET, Ask(500, 1.0), reservation_id="a", now_ms=T0)
        assert held.store == "redis"
        admin.config_set("maxmemory", 1)  # noeviction (the default): writes are refused
        during = await store.reserve("acme", RATES, Ask(300), reservation_id="b", now_ms=T0 + 20)
        assert (during.store, store.is_primary_down) == ("memory", True)
        with pytest.raises(QuotaStoreUnavailable):
            await store.reserve("zeta", BUDGET, Ask(1, 0.1), reservation_id="c", now_ms=T0 + 30)
        assert (await store.usage("acme", RATES, now_ms=T0 + 40)).tokens_used == 300
        admin.config_set("maxmemory", 0)
        again = await store.reserve("zeta", BUDGET, Ask(1), reservation_id="d", now_ms=T0 + 1_040)
        assert (again.store, store.is_primary_down) == ("redis", False)
        assert await store.settle(held, Actual(200, 0.4), now_ms=T0 + 1_050) == Settlement(
            "settled", 0, 0.4
        )
        await store.close()

    try:
        asyncio.run(main())
    finally:
        admin.close()


def test_one_tenants_deferred_settles_never_push_out_anothers() -> None:
    """While Redis is down, globex's flood of settles fills only globex's share of the deferred
    settles: acme's one settle, deferred first, still reaches Redis (acme pays its $0.40, not the
    $1.00 it held), and the replay serves the tenants in turn."""

    async def main() -> None:
        shared = SwitchableStore()
        store = FailoverQuotaStore(
            shared, MemoryQuotaStore(), max_pending_settles=3, replay_batch=1
        )
        acme = await store.reserve("acme", BUDGET, Ask(500, 1.0), reservation_id="a", now_ms=T0)
        floods = [
            await store.reserve("globex", RATES, Ask(10), reservation_id=f"g{i}", now_ms=T0)
            for i in range(5)
        ]
        shared.is_down = True
        await store.settle(acme, Actual(200, 0.4), now_ms=T0 + 10)
        for held in floods:
            await store.settle(held, Actual(1), now_ms=T0 + 10)
        assert store.num_pending_settles == 4  # acme's one, globex's newest three
        shared.is_down = False
        # the next call reaches Redis, a batch replayed before it and one after: acme's, then
        # one of globex's
        await store.reserve("initech", RATES, Ask(1), reservation_id="i", now_ms=T0 + 1_010)
        assert store.num_pending_settles == 2
        acme_use = await shared.inner.usage("acme", BUDGET, now_ms=T0 + 1_010)
        assert (acme_use.concurrent, acme_use.held_micro_usd, acme_use.spend_micro_usd) == (
            0,
            0,
            400_000,
        )
        await store.reserve("initech", RATES, Ask(1), reservation_id="j", now_ms=T0 + 1_020)
        globex_use = await shared.inner.usage("globex", RATES, now_ms=T0 + 1_030)
        assert (store.num_pending_settles, globex_use.concurrent) == (0, 2)  # 2 left to expire

    asyncio.run(main())


class AnswerLost(SwitchableStore):
    """Runs the reserve, then loses its answer: a timeout, or a resend after a dropped
    connection that finds the first send's id (`ReservationConflict`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error: Exception | None = error

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        held = await super().reserve(
            tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        error, self.error = self.error, None
        if error is not None:
            raise error
        return held


@pytest.mark.parametrize(
    "error",
    [QuotaStoreUnavailable("redis", "TimeoutError"), ReservationConflict("a")],
    ids=["timeout", "resent"],
)
def test_a_reserve_whose_answer_was_lost_gives_its_hold_back(error: Exception) -> None:
    """The script ran in Redis but its answer never came: the call is refused (its tenant's
    budget fails closed; not a 500), and the hold it left is given back on the next call that
    reaches Redis, instead of holding acme's slot for the lease and then charging its $1."""
    limits = Limits(concurrent_requests=1, monthly_budget_usd=5.0)

    async def main() -> None:
        shared = AnswerLost(error)
        store = FailoverQuotaStore(shared, MemoryQuotaStore(), probe_interval_ms=1_000)
        with pytest.raises(QuotaStoreUnavailable):
            await store.reserve("acme", limits, Ask(500, 1.0), reservation_id="a", now_ms=T0)
        assert (await shared.inner.usage("acme", limits, now_ms=T0)).concurrent == 1
        again = await store.reserve(
            "acme", limits, Ask(5, 0.1), reservation_id="b", now_ms=T0 + 1_000
        )
        assert again.store == "redis"
        usage = await shared.inner.usage("acme", limits, now_ms=T0 + 1_000)
        assert (usage.concurrent, usage.tokens_used, usage.held_micro_usd) == (1, 5, 100_000)
        assert store.num_pending_settles == 0

    asyncio.run(main())


class ToolAnswerLost(SwitchableStore):
    """Admits the tool call, then loses the answer (a timeout after the script ran)."""

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        lease = await super().admit_tool_call(
            tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
        )
        if call_id == "lost":
            raise QuotaStoreUnavailable("redis", "TimeoutError")
        return lease


@pytest.mark.parametrize("way", ["ended_while_down", "admit_answer_lost"])
def test_a_tool_calls_slot_owed_to_redis_is_given_back_when_it_answers(way: str) -> None:
    """acme may run one tool call at a time. Its call ended while Redis was down, or its admit
    ran in Redis without the answer arriving: either way the slot is given back once Redis
    answers, not held there for the 900 s lease."""
    tools = ToolCallLimits(concurrent=1)

    async def main() -> None:
        shared = ToolAnswerLost()
        store = FailoverQuotaStore(shared, MemoryQuotaStore(), probe_interval_ms=1_000)
        if way == "ended_while_down":
            lease = await store.admit_tool_call(
                "acme", tools, call_id="t1", session_id=None, now_ms=T0
            )
            assert lease.store == "redis"
            shared.is_down = True
            await store.end_tool_call(lease, now_ms=T0 + 10)
            shared.is_down = False
        else:
            fallback = await store.admit_tool_call(
                "acme", tools, call_id="lost", session_id=None, now_ms=T0
            )
            assert fallback.store == "memory"  # tool calls fail open by default
            await store.end_tool_call(fallback, now_ms=T0 + 10)
        again = await store.admit_tool_call(
            "acme", tools, call_id="t2", session_id=None, now_ms=T0 + 1_010
        )
        assert (again.store, store.num_pending_settles) == ("redis", 0)

    asyncio.run(main())
