"""A Redis that loses its data with no call seeing an outage (restarted without persistence,
flushed, evicted) must not count a tenant's month from zero: a store that requires seeded spend
refuses to admit against an unseeded budget, and admission seeds it from the ledger first."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import redis

from gateway.core.admission import Admission
from gateway.ledger.db import create_ledger_engine, migrate_engine, session_factory
from gateway.settings import Settings
from quotas.errors import QuotaExceeded, QuotaStoreUnavailable, SpendNotSeeded
from quotas.limits import Ask, Limits
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore
from tests.quotas.conftest import OwnRedis, delete_prefix
from tests.quotas.test_admission import ledger_row, tenant
from tests.quotas.test_quota_limits import T0

BUDGET = Limits(monthly_budget_usd=5.0)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def seeded_store(request: pytest.FixtureRequest) -> object:
    """A factory of stores that require seeded spend, of each kind."""
    if request.param == "memory":
        return lambda: MemoryQuotaStore(requires_seeded_spend=True)
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    request.addfinalizer(lambda: delete_prefix(url, prefix))
    return lambda: RedisQuotaStore.from_url(url, key_prefix=prefix, requires_seeded_spend=True)


def test_a_budget_is_checked_only_against_a_seeded_spend(seeded_store: object) -> None:
    async def main() -> None:
        store: QuotaStore = seeded_store()  # type: ignore[operator]
        with pytest.raises(SpendNotSeeded) as unseeded:
            await store.reserve("acme", BUDGET, Ask(1, 0.5), reservation_id="a", now_ms=T0)
        assert (unseeded.value.tenant, unseeded.value.period) == ("acme", "2026-11")
        usage = await store.usage("acme", BUDGET, now_ms=T0)
        assert (usage.concurrent, usage.held_micro_usd, usage.requests_used) == (0, 0, 0)
        await store.reserve("acme", Limits(), Ask(1, 0.5), reservation_id="b", now_ms=T0)
        await store.seed_spend("acme", "2026-11", 4_000_000, now_ms=T0)
        await store.reserve("acme", BUDGET, Ask(1, 0.5), reservation_id="c", now_ms=T0)
        with pytest.raises(QuotaExceeded) as over:
            await store.reserve("acme", BUDGET, Ask(1, 0.75), reservation_id="d", now_ms=T0)
        assert (over.value.limit, over.value.current) == ("monthly_budget_usd", 5.0)  # b held too
        with pytest.raises(SpendNotSeeded):  # a new month is seeded anew
            await store.reserve("acme", BUDGET, Ask(1), reservation_id="e", now_ms=T0 + 30 * DAY)
        await store.close()

    asyncio.run(main())


DAY = 86_400_000


def _ledger(tmp_path: Path, now_s: float) -> object:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate_engine(engine)
    with session_factory(engine).begin() as session:
        session.add(ledger_row("r1", "acme", datetime.fromtimestamp(now_s, UTC), Decimal("3.25")))
    return engine


def _flush(server: OwnRedis) -> None:
    """Every key gone under a running gateway, as a restart without persistence leaves it."""
    client = redis.Redis(port=server.port)
    client.flushall()
    client.close()


@pytest.mark.redis
def test_a_flushed_redis_still_refuses_a_tenant_over_its_budget(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    now_s = time.time()
    engine = _ledger(tmp_path, now_s)
    acme, globex = tenant(monthly_budget_usd=5.0), tenant("globex", monthly_budget_usd=5.0)

    async def reserve(who: object, worst_usd: float) -> object:
        return await admission.reserve(
            who,  # type: ignore[arg-type]
            session_id=None,
            prompt_tokens=1,
            max_output_tokens=1,
            worst_case_usd=worst_usd,
            now_s=now_s,
        )

    async def main() -> None:
        await admission.start(engine)  # type: ignore[arg-type]
        _flush(own_redis)
        with pytest.raises(QuotaExceeded) as refused:
            await reserve(acme, 2.0)
        assert (refused.value.limit, refused.value.current) == ("monthly_budget_usd", 3.25)
        usage = await admission.store.usage("acme", BUDGET, now_ms=int(now_s * 1000))
        assert usage.spend_micro_usd == 3_250_000
        # a tenant the ledger has nothing for is seeded at 0 and served; acme's next fits
        await asyncio.gather(reserve(globex, 4.0), reserve(acme, 1.5))
        assert admission.metrics.store_down._value.get() == 0  # no call saw an outage
        await admission.aclose()

    admission = Admission.from_settings(Settings(redis_url=own_redis.url))
    try:
        asyncio.run(main())
    finally:
        engine.dispose()  # type: ignore[attr-defined]


@pytest.mark.redis
@pytest.mark.parametrize("mode", ["fail_closed", "fail_open"])
def test_a_flushed_redis_with_the_ledger_unreadable_follows_the_budget_policy(
    own_redis: OwnRedis, tmp_path: Path, mode: str
) -> None:
    now_s = time.time()
    engine = _ledger(tmp_path, now_s)
    acme = tenant(monthly_budget_usd=5.0, on_store_down={"budget": mode})

    async def main() -> None:
        await admission.start(engine)  # type: ignore[arg-type]
        _flush(own_redis)
        (tmp_path / "ledger.db").unlink()  # the next read finds no table
        engine.dispose()  # type: ignore[attr-defined]
        reserving = admission.reserve(
            acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=2.0
        )
        if mode == "fail_closed":
            with pytest.raises(QuotaStoreUnavailable) as down:
                await reserving
            assert down.value.store == "ledger"
        else:  # the tenant chose to be served: its spend counts from 0
            ticket = await reserving
            assert ticket.reservation.cost_micro_usd == 2_000_000
        await admission.aclose()

    admission = Admission.from_settings(Settings(redis_url=own_redis.url))
    try:
        asyncio.run(main())
    finally:
        engine.dispose()  # type: ignore[attr-defined]


@pytest.mark.redis
def test_before_the_ledger_answers_a_budget_counts_from_zero_until_start(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    """The process has not reached its database yet: a call is served against a spend of 0
    (as without Redis), and the start-up seeding raises the spend once the database answers."""
    now_s = time.time()
    engine = _ledger(tmp_path, now_s)
    acme = tenant(monthly_budget_usd=5.0)

    async def reserve(worst_usd: float) -> object:
        return await admission.reserve(
            acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=worst_usd
        )

    async def main() -> None:
        await reserve(2.0)
        await admission.start(engine)  # type: ignore[arg-type]
        with pytest.raises(QuotaExceeded) as refused:
            await reserve(0.5)
        assert (refused.value.limit, refused.value.current) == ("monthly_budget_usd", 5.25)
        await admission.aclose()

    admission = Admission.from_settings(Settings(redis_url=own_redis.url))
    try:
        asyncio.run(main())
    finally:
        engine.dispose()  # type: ignore[attr-defined]
