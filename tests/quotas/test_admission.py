"""gateway/core/admission.py with a fake clock: policy mapping, weighted token counting, rate headers,
rejection attributes, budget alarm webhook, seeding from the ledger (a caller cancelled mid-settle
or mid-reserve: test_admission_cancel.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from adapters.types import Usage
from gateway.core.admission import (
    Admission,
    AdmissionMetrics,
    _duration,
    rate_limit_headers,
)
from gateway.ledger.db import create_ledger_engine, migrate_engine, session_factory
from gateway.ledger.models import UsageRecord
from policies.limits import LimitsPolicy, StoreDownPolicy, TokenWeights
from policies.model import TenantPolicy
from quotas.errors import LimitNeverFits, QuotaExceeded, QuotaStoreUnavailable
from quotas.failover import FailoverQuotaStore
from quotas.limits import Limits
from quotas.memory import MemoryQuotaStore
from tests.quotas.conftest import SwitchableStore

T0_S = datetime(2026, 11, 10, 12, 0, tzinfo=UTC).timestamp()


class FakeClock:
    def __init__(self, now_s: float = T0_S) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def tenant(name: str = "acme", **limits: object) -> TenantPolicy:
    return TenantPolicy(tenant=name, limits=LimitsPolicy.model_validate(limits))


def ids() -> object:
    counter = iter(range(1_000_000))
    return lambda: f"id{next(counter)}"


def build(
    store: object | None = None, **kwargs: object
) -> tuple[Admission, CollectorRegistry, FakeClock]:
    registry, clock = CollectorRegistry(), FakeClock()
    admission = Admission(
        store or MemoryQuotaStore(),  # type: ignore[arg-type]
        metrics=AdmissionMetrics(registry),
        clock=clock,
        new_id=ids(),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )
    return admission, registry, clock


async def tokens_used(admission: Admission, policy: TenantPolicy) -> int:
    limits = Limits(tokens_per_minute=policy.limits.tokens_per_minute)
    usage = await admission.store.usage(policy.tenant, limits, now_ms=int(T0_S * 1000) + 1)
    return usage.tokens_used


def test_reserve_worst_case_and_settle_weighted_usage() -> None:
    weights = TokenWeights(cache_read=0.1, cache_write=1.25)
    acme = tenant(tokens_per_minute=10_000, token_weights=weights)

    async def main() -> None:
        admission, _, _ = build()
        ticket = await admission.reserve(
            acme, session_id="s", prompt_tokens=1000, max_output_tokens=200, worst_case_usd=0.02
        )
        # every prompt token may be a 1.25-weight cache write: 1250 + 200
        assert ticket.reservation.tokens == 1450
        assert ticket.reservation.cost_micro_usd == 20_000
        assert await tokens_used(admission, acme) == 1450
        usage = Usage(
            input_tokens=100, output_tokens=50, cache_read_tokens=800, cache_write_tokens=100
        )
        await admission.settle(ticket, usage=usage, cost_usd=0.004)
        # 100 + 50 + ceil(800 * 0.1 + 100 * 1.25)
        assert await tokens_used(admission, acme) == 355

    asyncio.run(main())


def test_rate_headers_for_tickets_and_rejections() -> None:
    acme = tenant(tokens_per_minute=2_000, requests_per_minute=60)

    async def main() -> None:
        admission, registry, clock = build()
        ticket = await admission.reserve(
            acme, session_id=None, prompt_tokens=1000, max_output_tokens=450, worst_case_usd=0.0
        )
        assert admission.rate_headers(ticket) == {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-reset-requests": "1m0s",
            "x-ratelimit-limit-tokens": "2000",
            "x-ratelimit-remaining-tokens": "550",
            "x-ratelimit-reset-tokens": "1m0s",
        }
        clock.now_s += 12.5
        with pytest.raises(QuotaExceeded) as info:
            await admission.reserve(
                acme, session_id=None, prompt_tokens=500, max_output_tokens=100, worst_case_usd=0.0
            )
        err = info.value
        assert (err.limit, err.limit_value, err.current, err.retry_after_s) == (
            "tokens_per_minute",
            2000,
            1450,
            48,
        )
        assert rate_limit_headers(err) == {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-reset-requests": "47.5s",
            "x-ratelimit-limit-tokens": "2000",
            "x-ratelimit-remaining-tokens": "550",
            "x-ratelimit-reset-tokens": "47.5s",
        }
        labels = {"tenant": "acme", "limit": "tokens_per_minute"}
        assert registry.get_sample_value("lantern_quota_rejections_total", labels) == 1.0
        with pytest.raises(LimitNeverFits) as never:
            await admission.reserve(
                acme, session_id=None, prompt_tokens=1990, max_output_tokens=11, worst_case_usd=0.0
            )
        assert (never.value.limit, never.value.limit_value, never.value.requested) == (
            "tokens_per_minute",
            2000,
            2001,
        )
        assert admission.rate_headers(ticket) == rate_limit_headers(ticket)
        unlimited = await admission.reserve(
            tenant("zeta"),
            session_id=None,
            prompt_tokens=5,
            max_output_tokens=5,
            worst_case_usd=0.0,
        )
        assert admission.rate_headers(unlimited) == {}

    asyncio.run(main())


def test_durations_in_openai_format() -> None:
    assert [
        _duration(ms) for ms in (0, 20, 999, 1_000, 1_500, 59_999, 60_000, 360_000, 61_250)
    ] == [
        "0ms",
        "20ms",
        "999ms",
        "1s",
        "1.5s",
        "59.999s",
        "1m0s",
        "6m0s",
        "1m1.25s",
    ]


def test_budget_alarm_fires_once_with_webhook() -> None:
    posted: list[dict[str, object]] = []

    def hook(request: httpx.Request) -> httpx.Response:
        posted.append(json.loads(request.content))
        return httpx.Response(204)

    acme = tenant(
        monthly_budget_usd=10.0,
        budget_alarm_ratio=0.5,
        budget_alarm_webhook="https://alarms.example/budget",
    )

    async def main() -> None:
        http = httpx.AsyncClient(transport=httpx.MockTransport(hook))
        admission, registry, _ = build(http=http)
        for cost in (4.0, 2.0, 1.0):
            ticket = await admission.reserve(
                acme, session_id=None, prompt_tokens=10, max_output_tokens=10, worst_case_usd=cost
            )
            await admission.settle(ticket, usage=Usage(10, 10), cost_usd=cost)
        await admission.aclose()  # waits for the webhook task
        await http.aclose()
        assert registry.get_sample_value("lantern_budget_alarms_total", {"tenant": "acme"}) == 1.0
        assert registry.get_sample_value("lantern_budget_spend_usd", {"tenant": "acme"}) == 7.0

    asyncio.run(main())
    assert posted == [{"tenant": "acme", "period": "2026-11", "spend_usd": 6.0, "budget_usd": 10.0}]


def test_store_down_fails_open_for_rates_and_closed_for_budgets() -> None:
    rates = tenant("acme", tokens_per_minute=1_000)
    money = tenant("zeta", monthly_budget_usd=5.0)
    open_money = tenant(
        "beta", monthly_budget_usd=5.0, on_store_down=StoreDownPolicy(budget="fail_open")
    )

    async def main() -> None:
        shared = SwitchableStore()
        admission, registry, _ = build(FailoverQuotaStore(shared, MemoryQuotaStore()))
        shared.is_down = True
        for policy in (rates, open_money):
            ticket = await admission.reserve(
                policy, session_id=None, prompt_tokens=10, max_output_tokens=10, worst_case_usd=1.0
            )
            assert ticket.reservation.store == "memory"
        with pytest.raises(QuotaStoreUnavailable):
            await admission.reserve(
                money, session_id=None, prompt_tokens=10, max_output_tokens=10, worst_case_usd=1.0
            )
        sample = registry.get_sample_value
        assert sample("lantern_quota_fallback_admissions_total", {"tenant": "acme"}) == 1.0
        assert sample("lantern_quota_fallback_admissions_total", {"tenant": "beta"}) == 1.0
        assert (
            sample(
                "lantern_quota_rejections_total", {"tenant": "zeta", "limit": "store_unavailable"}
            )
            == 1.0
        )

    asyncio.run(main())


def test_start_seeds_month_spend_from_the_ledger(tmp_path: Path) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate_engine(engine)
    rows = [
        ("acme", datetime(2026, 11, 2, tzinfo=UTC), "2.25"),
        ("acme", datetime(2026, 11, 9, tzinfo=UTC), "1.00"),
        ("acme", datetime(2026, 10, 30, tzinfo=UTC), "100.00"),  # last month
        ("zeta", datetime(2026, 11, 3, tzinfo=UTC), "0.50"),
    ]
    with session_factory(engine).begin() as session:
        for i, (name, ts, cost) in enumerate(rows):
            session.add(ledger_row(f"row{i}", name, ts, Decimal(cost)))
    acme = tenant(monthly_budget_usd=5.0)

    async def main() -> None:
        admission, _, _ = build()
        await admission.start(engine)
        limits = Limits(monthly_budget_usd=5.0)
        usage = await admission.store.usage("acme", limits, now_ms=int(T0_S * 1000))
        assert usage.spend_micro_usd == 3_250_000
        with pytest.raises(QuotaExceeded) as info:
            await admission.reserve(
                acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=2.0
            )
        assert (info.value.limit, info.value.current) == ("monthly_budget_usd", 3.25)

    try:
        asyncio.run(main())
    finally:
        engine.dispose()


def ledger_row(row_id: str, name: str, ts: datetime, cost: Decimal) -> UsageRecord:
    return UsageRecord(
        id=row_id,
        ts=ts,
        tenant=name,
        key_id="k",
        session_id=None,
        model="m",
        backend="b",
        replica=None,
        attempt=1,
        status="ok",
        error_kind=None,
        input_tokens=1,
        cache_read_tokens=0,
        cache_write_tokens=0,
        output_tokens=1,
        cost_usd=cost,
        uncached_cost_usd=cost,
        ttft_ms=None,
        latency_ms=1.0,
        cache_diagnosis=None,
        request_id=row_id,
    )


def test_a_reloaded_limits_policy_applies_at_once() -> None:
    """Limits are memoised per policy object: the same object reuses them, a reload (a new
    object, here a tighter tokens_per_minute) takes effect on the very next call."""

    async def main() -> None:
        admission, _, _ = build()
        loose = tenant(tokens_per_minute=10_000)
        for _ in range(2):
            ticket = await admission.reserve(
                loose, session_id=None, prompt_tokens=1000, max_output_tokens=0, worst_case_usd=0
            )
            assert ticket.limits.tokens_per_minute == 10_000
        tight = tenant(tokens_per_minute=2_500)  # 2,000 already held: 1,000 more does not fit
        with pytest.raises(QuotaExceeded) as caught:
            await admission.reserve(
                tight, session_id=None, prompt_tokens=1000, max_output_tokens=0, worst_case_usd=0
            )
        assert (caught.value.limit, caught.value.limit_value) == ("tokens_per_minute", 2_500)
        ticket = await admission.reserve(
            loose, session_id=None, prompt_tokens=1000, max_output_tokens=0, worst_case_usd=0
        )
        assert ticket.limits.tokens_per_minute == 10_000  # the old object still gives its own

    asyncio.run(main())
