"""A Redis that comes back empty (restarted without persistence): the month's spend each tenant
had comes back from the ledger, so a budget is not spent twice."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.core.admission import Admission
from gateway.ledger.db import create_ledger_engine, migrate_engine, session_factory
from gateway.settings import Settings
from quotas.errors import QuotaExceeded, QuotaStoreUnavailable
from quotas.limits import Limits
from tests.quotas.conftest import OwnRedis
from tests.quotas.test_admission import ledger_row, tenant


@pytest.mark.redis
def test_a_redis_restarted_empty_gets_the_months_spend_again(
    own_redis: OwnRedis, tmp_path: Path
) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate_engine(engine)
    now_s = time.time()  # the ledger's month is the gateway's
    with session_factory(engine).begin() as session:
        session.add(ledger_row("r1", "acme", datetime.fromtimestamp(now_s, UTC), Decimal("3.25")))
    acme = tenant(monthly_budget_usd=5.0)  # budgets fail closed while Redis is down

    async def reserve(worst_usd: float, at_s: float) -> object:
        return await admission.reserve(
            acme,
            session_id=None,
            prompt_tokens=1,
            max_output_tokens=1,
            worst_case_usd=worst_usd,
            now_s=at_s,
        )

    async def main() -> None:
        await admission.start(engine)
        own_redis.kill()
        with pytest.raises(QuotaStoreUnavailable):
            await reserve(0.0, now_s)
        own_redis.start()  # back, empty
        await reserve(0.0, now_s + 2)  # past the probe interval: Redis answers again
        await asyncio.gather(*admission._background)
        usage = await admission.store.usage(
            "acme", Limits(monthly_budget_usd=5.0), now_ms=int((now_s + 2) * 1000)
        )
        assert usage.spend_micro_usd == 3_250_000
        with pytest.raises(QuotaExceeded) as refused:
            await reserve(2.0, now_s + 2)
        assert (refused.value.limit, refused.value.current) == ("monthly_budget_usd", 3.25)
        await admission.aclose()

    admission = Admission.from_settings(Settings(redis_url=own_redis.url))
    try:
        asyncio.run(main())
    finally:
        engine.dispose()
