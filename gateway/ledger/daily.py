"""Reading `usage_daily`, the ledger summed per UTC day, tenant, model, backend and key (kept by
triggers on `usage` as rows are inserted: migration 0005).

A report over [since, until) reads the whole UTC days of its window here and only the partial
days at its ends (today's, when `until` is now) from `usage`; `LedgerQueries.usage_totals`
does the split and adds the pieces up.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from gateway.ledger.models import UsageDailyRecord

# the group-by keys the rollup holds (a session is not one of them)
DAILY_KEYS = frozenset({"tenant", "model", "backend", "day", "key", "month"})
_E8 = Decimal(10) ** 8


def whole_days(since: datetime, until: datetime) -> tuple[datetime, datetime] | None:
    """[first, last): the UTC midnights bounding the whole days inside [since, until), or None
    when the window holds no whole day."""
    start = since.astimezone(UTC)
    first = start.replace(hour=0, minute=0, second=0, microsecond=0)
    if first < start:
        first += timedelta(days=1)
    last = until.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (first, last) if first < last else None


def daily_rows(
    session: Session, first: datetime, last: datetime, group_by: Sequence[str]
) -> list[tuple[Any, ...]]:
    """Per group over the whole days [first, last): the group values, then calls, the four
    token sums, cost and uncached cost (exact Decimals), the 1 h cache writes and the reasoning
    tokens, as `usage`'s own aggregation gives them (queries.py `_sums`). Without group keys:
    one row, whose call count is NULL when nothing was stored."""
    d = UsageDailyRecord
    dialect = session.get_bind().dialect.name
    keys = [_daily_column(key, dialect) for key in group_by]
    query = (
        sa.select(
            *keys,
            sa.func.sum(d.num_calls),
            sa.func.sum(d.input_tokens),
            sa.func.sum(d.cache_read_tokens),
            sa.func.sum(d.cache_write_tokens),
            sa.func.sum(d.output_tokens),
            sa.func.sum(d.cost_e8),
            sa.func.sum(d.uncached_cost_e8),
            sa.func.sum(d.cache_write_1h_tokens),
            sa.func.sum(d.reasoning_tokens),
        )
        .where(d.day >= first.date(), d.day < last.date())
        .group_by(*keys)
    )
    width = len(keys)
    return [
        (*row[: width + 5], _dollars(row[width + 5]), _dollars(row[width + 6]), *row[width + 7 :])
        for row in session.execute(query).all()
    ]


def _dollars(units: int | Decimal | None) -> Decimal | None:
    """1e-8 dollar units (an int, or a Decimal where PostgreSQL sums bigints) as dollars."""
    return None if units is None else Decimal(units) / _E8


def _daily_column(key: str, dialect: str) -> sa.ColumnElement[Any]:
    d = UsageDailyRecord
    if key == "month":
        if dialect == "postgresql":
            return sa.func.to_char(d.day, "YYYY-MM").label("month")
        return sa.func.strftime("%Y-%m", d.day).label("month")
    if key == "key":
        return d.key_id.label("key")
    if key not in DAILY_KEYS:
        raise ValueError(f"usage_daily has no {key!r}; use {sorted(DAILY_KEYS)}")
    column: sa.ColumnElement[Any] = getattr(d, key)
    return column.label(key)


def spend_since(
    session: Session, keys: Sequence[tuple[str, str]], day: date
) -> dict[tuple[str, str], Decimal]:
    """Dollars each (tenant, key id) of `keys` spent from UTC midnight of `day` on, up to the
    last row stored (today's included): the key budgets' windows, read from the rollup alone.
    A key id names a key within its tenant only: two tenants' `prod` are two keys."""
    d = UsageDailyRecord
    query = (
        sa.select(d.tenant, d.key_id, sa.func.sum(d.cost_e8))
        .where(sa.tuple_(d.tenant, d.key_id).in_(list(keys)), d.day >= day)
        .group_by(d.tenant, d.key_id)
    )
    return {
        (tenant, key): _dollars(units) or Decimal(0)
        for tenant, key, units in session.execute(query)
    }
