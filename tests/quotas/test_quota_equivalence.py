"""The reference check of the two stores: the same random sequences of reserve, settle, clock
moves (lease expiry, window slide, month change) and seeding give identical decisions, with and
without requiring a seeded spend before a budget is checked."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quotas.errors import LimitNeverFits, QuotaExceeded, ReservationConflict, SpendNotSeeded
from quotas.limits import Actual, Ask, Limits, Reservation
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore
from tests.quotas.conftest import delete_prefix

# two minutes before a month ends, so sequences cross into December
START_MS = int(datetime(2026, 11, 30, 23, 58, tzinfo=UTC).timestamp() * 1000)
TENANTS = ("acme", "zeta")
SESSIONS = (None, "s1", "s2")


@dataclass(frozen=True)
class Reserve:
    tenant: int
    tokens: int
    cost_usd: float
    session: int
    reuse_id: bool


@dataclass(frozen=True)
class Settle:
    pick: int
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class Tick:
    ms: int
    lag_ms: int  # the next caller's clock runs behind by this much


@dataclass(frozen=True)
class Look:
    tenant: int
    session: int


@dataclass(frozen=True)
class Seed:
    tenant: int
    micro_usd: int


def optional(*values: int) -> st.SearchStrategy[int | None]:
    """Mostly a tight limit, sometimes none."""
    return st.sampled_from([None, *values])


limits_strategy = st.builds(
    Limits,
    tokens_per_minute=optional(50, 450, 1_000),
    requests_per_minute=optional(1, 3, 8),
    concurrent_requests=optional(1, 2, 4),
    calls_per_session=optional(1, 3, 5),
    monthly_budget_usd=st.sampled_from([None, 0.0, 0.002, 0.01, 0.05]),
    window_ms=st.sampled_from([1_000, 60_000]),
    lease_ms=st.sampled_from([500, 5_000, 30_000]),
    session_ttl_ms=st.sampled_from([2_000, 90_000]),
)
cost = st.sampled_from([0.0, 0.000001, 0.0005, 0.001234, 0.003, 0.02])
reserve_strategy = st.builds(
    Reserve,
    st.integers(0, 1),
    st.integers(0, 60) | st.integers(0, 450),
    cost,
    st.integers(0, 2),
    st.integers(0, 9).map(lambda n: n == 0),
)
op_strategy = st.one_of(
    reserve_strategy,
    reserve_strategy,
    st.builds(Settle, st.integers(0, 1_000), st.integers(0, 500), cost),
    st.builds(
        Tick,
        st.sampled_from([0, 1, 250, 999, 1_000, 4_999, 30_000, 60_000]),
        st.sampled_from([0, 0, 0, 700]),
    ),
    st.builds(Look, st.integers(0, 1), st.integers(0, 2)),
    st.builds(Seed, st.integers(0, 1), st.sampled_from([0, 1_500, 20_000])),
)


async def replay(store: QuotaStore, limits: Limits, ops: list[object]) -> list[object]:
    """Apply `ops` to `store` and return every observable outcome, in order."""
    now, lag = START_MS, 0
    held: list[Reservation] = []
    outcomes: list[object] = []
    for i, op in enumerate(ops):
        at = now - lag
        if isinstance(op, Reserve):
            rid = held[i % len(held)].id if op.reuse_id and held else f"r{i}"
            ask = Ask(op.tokens, op.cost_usd, SESSIONS[op.session])
            try:
                reservation = await store.reserve(
                    TENANTS[op.tenant], limits, ask, reservation_id=rid, now_ms=at
                )
            except QuotaExceeded as exc:
                event(f"exceeded {exc.limit}")
                outcomes.append(
                    (
                        "exceeded",
                        exc.limit,
                        exc.limit_value,
                        exc.current,
                        exc.retry_after_ms,
                        exc.window,
                    )
                )
            except LimitNeverFits as exc:
                event(f"never fits {exc.limit}")
                outcomes.append(("never", exc.limit, exc.limit_value, exc.requested))
            except ReservationConflict as exc:
                outcomes.append(("conflict", exc.reservation_id))
            except SpendNotSeeded as exc:
                event("unseeded")
                outcomes.append(("unseeded", exc.tenant, exc.period))
            else:
                event("admitted")
                held.append(reservation)
                outcomes.append(("ok", replace(reservation, store="memory")))
        elif isinstance(op, Settle) and held:
            reservation = held[op.pick % len(held)]
            settlement = await store.settle(reservation, Actual(op.tokens, op.cost_usd), now_ms=at)
            event(f"settle {settlement.status}")
            outcomes.append(settlement)
        elif isinstance(op, Tick):
            now, lag = now + op.ms, op.lag_ms
        elif isinstance(op, Look):
            outcomes.append(
                await store.usage(
                    TENANTS[op.tenant], limits, now_ms=at, session_id=SESSIONS[op.session]
                )
            )
        elif isinstance(op, Seed):
            period = "2026-11" if at < START_MS + 120_000 else "2026-12"
            await store.seed_spend(TENANTS[op.tenant], period, op.micro_usd, now_ms=at)
    for tenant in TENANTS:
        outcomes.append(await store.usage(tenant, limits, now_ms=now + 10_000))
    return outcomes


async def both(
    redis_url: str, prefix: str, limits: Limits, ops: list[object], seeded: bool
) -> tuple[list[object], list[object]]:
    memory = MemoryQuotaStore(requires_seeded_spend=seeded)
    shared = RedisQuotaStore.from_url(redis_url, key_prefix=prefix, requires_seeded_spend=seeded)
    try:
        return await replay(memory, limits, ops), await replay(shared, limits, ops)
    finally:
        await shared.close()


@pytest.mark.redis
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limits=limits_strategy,
    ops=st.lists(op_strategy, min_size=10, max_size=80),
    seeded=st.booleans(),
)
def test_memory_and_redis_decide_identically(
    redis_url: str, redis_prefix: str, limits: Limits, ops: list[object], seeded: bool
) -> None:
    prefix = f"{redis_prefix}{uuid.uuid4().hex[:8]}:"
    try:
        memory_outcomes, redis_outcomes = asyncio.run(both(redis_url, prefix, limits, ops, seeded))
    finally:
        delete_prefix(redis_url, prefix)
    assert redis_outcomes == memory_outcomes
