"""A month of ledger traffic for the console tests: every day, acme calls gpt-4o-mini through an
API backend and fleet-model on a self-hosted replica, and `other` calls claude; costs are exact
and known, so a test can compare what a page drew with the rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.ledger.models import UsageRow

NUM_DAYS = 30


@dataclass(frozen=True)
class Seeded:
    since: datetime
    rows: list[UsageRow]

    def spend(self, tenant: str, day: str) -> Decimal:
        return sum(
            (
                r.cost_usd
                for r in self.rows
                if r.tenant == tenant and r.ts.date().isoformat() == day
            ),
            Decimal(0),
        )

    def days(self) -> list[str]:
        return sorted({r.ts.date().isoformat() for r in self.rows})

    def month_to_date(self, tenant: str, now: datetime) -> Decimal:
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return sum(
            (r.cost_usd for r in self.rows if r.tenant == tenant and r.ts >= start), Decimal(0)
        )


def month_of_traffic(now: datetime) -> Seeded:
    since = datetime.combine((now - timedelta(days=NUM_DAYS)).date(), datetime.min.time(), UTC)
    rows: list[UsageRow] = []
    for day in range(NUM_DAYS):
        noon = since + timedelta(days=day, hours=12)
        rows += [
            _row(f"a{day}", noon, "acme", "gpt-4o-mini", "fake-openai", None, f"s-{day % 5}",
                 Decimal("1.00") + Decimal(day) / 100, 100_000),
            _row(f"f{day}", noon, "acme", "fleet-model", "fleet", "http://gpu-1/v1", f"s-{day % 5}",
                 Decimal("2.00"), 1_000_000),
            _row(f"o{day}", noon, "other", "claude-sonnet-4-5", "fake-anthropic", None, f"o-{day}",
                 Decimal("0.50"), 50_000),
        ]  # fmt: skip
    return Seeded(since, rows)


def _row(
    tag: str,
    ts: datetime,
    tenant: str,
    model: str,
    backend: str,
    replica: str | None,
    session: str,
    cost: Decimal,
    tokens: int,
) -> UsageRow:
    return UsageRow(
        id=f"seed-{tag}",
        ts=ts,
        tenant=tenant,
        key_id="k1",
        model=model,
        request_id=f"req-{tag}",
        status="ok",
        session_id=session,
        backend=backend,
        replica=replica,
        input_tokens=tokens,
        cache_read_tokens=tokens,
        output_tokens=tokens // 10,
        cost_usd=cost,
        uncached_cost_usd=cost * 2,
        latency_ms=100.0,
    )
