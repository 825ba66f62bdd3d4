"""Read-side aggregations over `usage`: cost totals by group, month-to-date spend, hourly tokens per
model and venue, a session's cache diagnoses. All windows are [since, until) in UTC.

Sync database I/O: async callers run these in a thread; never on the request path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.daily import DAILY_KEYS, daily_rows, whole_days
from gateway.ledger.models import UsageRecord, to_money
from gateway.ledger.tool_runs import TOOL_RUN_BACKEND

_TOOL_RUN_PREFIX = TOOL_RUN_BACKEND.format(runner="")  # `sandbox:`

GroupKey = Literal["tenant", "model", "backend", "day", "key", "session", "month", "door", "kind"]
GROUP_KEYS: tuple[str, ...] = (
    "tenant",
    "model",
    "backend",
    "day",
    "key",
    "session",
    "month",
    "door",  # the client's route, or keep_warm for the gateway's own keep-warm reads
    "kind",  # model_call, tool_call (the MCP door's row of a call) or tool_run (a sandboxed run)
)
Venue = Literal["fleet", "api"]
NO_BACKEND = "(none)"  # rows rejected before routing have no backend
NO_SESSION = "(none)"
NO_DOOR = "(none)"  # rows written before the ledger named the route


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Sums over the rows of one group; `group` holds the values of the group-by keys, in order."""

    group: tuple[str, ...]
    num_calls: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: Decimal
    uncached_cost_usd: Decimal
    cache_write_1h_tokens: int = 0  # of cache_write_tokens
    reasoning_tokens: int = 0  # of output_tokens


@dataclass(frozen=True, slots=True)
class HourlyModelTokens:
    """One model's traffic in one UTC hour on one venue (fleet: rows served by a replica)."""

    model: str
    venue: Venue
    hour: datetime
    num_calls: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: Decimal


class LedgerQueries:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def usage_totals(
        self, since: datetime, until: datetime, group_by: Sequence[str]
    ) -> list[UsageTotals]:
        """Totals per group, sorted by group values; one row overall (none if no calls) without
        keys. Whole UTC days come from the daily rollup (`usage_daily`) unless a session is a
        key; the partial days at the window's ends from `usage`."""
        unknown = [key for key in group_by if key not in GROUP_KEYS]
        if unknown:
            raise ValueError(f"unknown group-by key(s) {unknown}; use {GROUP_KEYS}")
        days = whole_days(since, until) if DAILY_KEYS.issuperset(group_by) else None
        with self._sessions() as session:
            if days is None:
                pieces = [_usage_rows(session, since, until, group_by)]
            else:
                first, last = days
                pieces = [daily_rows(session, first, last, group_by)]
                if since < first:
                    pieces.append(_usage_rows(session, since, first, group_by))
                if last < until:
                    pieces.append(_usage_rows(session, last, until, group_by))
        return _added_up(pieces, len(group_by))

    def month_spend_by_tenant(self, now: datetime) -> dict[str, float]:
        """Dollars each tenant's calls cost from the first of `now`'s UTC month up to `now`:
        what `monthly_budget_usd` counts, so tool runs are left out (docs/sandbox.md, "Tool
        runs and `monthly_budget_usd`")."""
        start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        if start >= now:
            return {}
        return {
            tenant: float(usd) for tenant, usd in self.budget_spend_by_tenant(start, now).items()
        }

    def budget_spend_by_tenant(self, since: datetime, until: datetime) -> dict[str, Decimal]:
        """Each tenant's spend over [since, until) less its tool runs' (their backend says so:
        `sandbox:<runner>`, a name no model backend may take), from the daily rollup as any
        report's, so the ledger keeps no index for it."""
        spend: dict[str, Decimal] = {}
        for totals in self.usage_totals(since, until, ["tenant", "backend"]):
            tenant, backend = totals.group
            spent = spend.get(tenant, Decimal(0))
            is_run = str(backend).startswith(_TOOL_RUN_PREFIX)
            spend[tenant] = spent if is_run else spent + totals.cost_usd
        return spend

    def hourly_model_tokens(self, since: datetime, until: datetime) -> list[HourlyModelTokens]:
        """Per model, venue and UTC hour: what the break-even report (F2) is computed from
        (model calls only)."""
        venue = sa.case((UsageRecord.replica.is_not(None), "fleet"), else_="api")
        with self._sessions() as session:
            hour = _hour_bucket(session)
            query = (
                sa.select(UsageRecord.model, venue, hour, *_sums()[:6])
                .where(UsageRecord.ts >= since, UsageRecord.ts < until)
                .where(UsageRecord.kind == "model_call")  # not the tools' rows
                .group_by(UsageRecord.model, venue, hour)
            )
            rows = session.execute(query).all()
        hourly = [
            HourlyModelTokens(
                model=model,
                venue=venue_name,
                hour=_parse_hour(bucket),
                num_calls=int(calls),
                input_tokens=int(inp or 0),
                cache_read_tokens=int(read or 0),
                cache_write_tokens=int(write or 0),
                output_tokens=int(out or 0),
                cost_usd=to_money(cost or 0),
            )
            for model, venue_name, bucket, calls, inp, read, write, out, cost in rows
        ]
        return sorted(hourly, key=lambda h: (h.model, h.venue, h.hour))

    def session_diagnoses(self, tenant: str, session_id: str) -> list[tuple[datetime, str]]:
        """(ts, diagnosis JSON) of one session's calls that carry a cache diagnosis, oldest first."""
        query = (
            sa.select(UsageRecord.ts, UsageRecord.cache_diagnosis)
            .where(
                UsageRecord.tenant == tenant,
                UsageRecord.session_id == session_id,
                UsageRecord.cache_diagnosis.is_not(None),
            )
            .order_by(UsageRecord.ts, UsageRecord.attempt)
        )
        with self._sessions() as session:
            return [(ts, diagnosis or "") for ts, diagnosis in session.execute(query)]

    def session_reads(
        self, session_id: str, tenant: str | None = None
    ) -> list[tuple[datetime, str, str, int]]:
        """(ts, tenant, diagnosis JSON, cache-read tokens the backend reported) of a session's
        diagnosed calls, oldest first; every tenant's when `tenant` is None."""
        u = UsageRecord
        query = (
            sa.select(u.ts, u.tenant, u.cache_diagnosis, u.cache_read_tokens)
            .where(u.session_id == session_id, u.cache_diagnosis.is_not(None))
            .order_by(u.ts, u.attempt)
        )
        if tenant is not None:
            query = query.where(u.tenant == tenant)
        with self._sessions() as session:
            return [(ts, t, d or "", int(r)) for ts, t, d, r in session.execute(query)]


def _usage_rows(
    session: Session, since: datetime, until: datetime, group_by: Sequence[str]
) -> list[Any]:
    """`usage` itself aggregated over [since, until): group values, then `_sums()`."""
    dialect = session.get_bind().dialect.name
    keys = [_group_column(key, dialect) for key in group_by]
    query = (
        sa.select(*keys, *_sums())
        .where(UsageRecord.ts >= since, UsageRecord.ts < until)
        .group_by(*keys)
    )
    return list(session.execute(query).all())


def _added_up(pieces: Sequence[Sequence[Any]], width: int) -> list[UsageTotals]:
    """One UsageTotals per group over every piece (the same group may be in several)."""
    merged: dict[tuple[str, ...], UsageTotals] = {}
    for rows in pieces:
        for row in rows:
            if not row[width]:  # an empty window still returns one all-NULL row without groups
                continue
            group = tuple(_text(v) for v in row[:width])
            totals = UsageTotals(group, *_totals(row[width:]))
            seen = merged.get(group)
            merged[group] = totals if seen is None else _plus(seen, totals)
    return sorted(merged.values(), key=lambda t: t.group)  # code-point order on every dialect


def _plus(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    return UsageTotals(
        a.group,
        a.num_calls + b.num_calls,
        a.input_tokens + b.input_tokens,
        a.cache_read_tokens + b.cache_read_tokens,
        a.cache_write_tokens + b.cache_write_tokens,
        a.output_tokens + b.output_tokens,
        a.cost_usd + b.cost_usd,
        a.uncached_cost_usd + b.uncached_cost_usd,
        a.cache_write_1h_tokens + b.cache_write_1h_tokens,
        a.reasoning_tokens + b.reasoning_tokens,
    )


def _sums() -> list[sa.ColumnElement[Any]]:
    """In `UsageTotals`' order (`daily_rows` gives the same)."""
    u = UsageRecord
    return [
        sa.func.count(u.id),
        sa.func.sum(u.input_tokens),
        sa.func.sum(u.cache_read_tokens),
        sa.func.sum(u.cache_write_tokens),
        sa.func.sum(u.output_tokens),
        sa.func.sum(u.cost_usd),
        sa.func.sum(u.uncached_cost_usd),
        sa.func.sum(u.cache_write_1h_tokens),
        sa.func.sum(u.reasoning_tokens),
    ]


def _totals(
    values: Sequence[Any],
) -> tuple[int, int, int, int, int, Decimal, Decimal, int, int]:
    """Sums as the driver returns them (NULL for no rows; floats on SQLite, Decimal on PG)."""
    calls, inp, read, write, out, cost, uncached, write_1h, reasoning = values
    return (
        int(calls),
        int(inp or 0),
        int(read or 0),
        int(write or 0),
        int(out or 0),
        to_money(cost or 0),
        to_money(uncached or 0),
        int(write_1h or 0),
        int(reasoning or 0),
    )


def _group_column(key: str, dialect: str = "sqlite") -> sa.ColumnElement[Any]:
    if key == "day":
        return sa.func.date(UsageRecord.ts).label("day")  # SQLite: text, PostgreSQL: date
    if key == "month":
        return month_bucket(dialect).label("month")
    if key == "key":
        return UsageRecord.key_id.label("key")
    if key == "session":
        return sa.func.coalesce(UsageRecord.session_id, NO_SESSION).label("session")
    if key == "backend":
        return sa.func.coalesce(UsageRecord.backend, NO_BACKEND).label("backend")
    if key == "door":
        return sa.func.coalesce(UsageRecord.door, NO_DOOR).label("door")
    column: sa.ColumnElement[Any] = getattr(UsageRecord, key)
    return column.label(key)


def month_bucket(dialect: str) -> sa.ColumnElement[Any]:
    """`YYYY-MM` of a row's UTC timestamp, as text on both dialects."""
    if dialect == "postgresql":
        return sa.func.to_char(UsageRecord.ts, "YYYY-MM")
    return sa.func.strftime("%Y-%m", UsageRecord.ts)


def _hour_bucket(session: Session) -> sa.ColumnElement[Any]:
    if session.get_bind().dialect.name == "postgresql":
        return sa.func.to_char(sa.func.date_trunc("hour", UsageRecord.ts), "YYYY-MM-DD HH24:00")
    return sa.func.strftime("%Y-%m-%d %H:00", UsageRecord.ts)


def _parse_hour(bucket: str) -> datetime:
    return datetime.strptime(bucket, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def _text(value: object) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)
