"""Spend views for the console and the admin API: spend per day by a dimension, budgets against
month-to-date spend with the month's projection, and the costliest sessions. Built on
`cost_report` (the CLI's own query), plus one bounded query for top sessions.

Sync database I/O: async callers use a thread.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.models import UsageRecord, to_money
from gateway.ledger.queries import LedgerQueries
from gateway.reports.rows import CostReport, InvalidReportQuery, check_view_size, cost_report

SPEND_DIMENSIONS = ("tenant", "model", "backend", "key", "kind")
TOOL_CALL = "tool_call"  # the ledger's kind of an MCP tool call's row (gateway/mcp/accounting.py)
MAX_PAGE = 200
MAX_OFFSET = 10**9


@dataclass(frozen=True, slots=True)
class SpendSeries:
    """Dollars per UTC day for each value of `dimension`; `report` is the underlying report."""

    dimension: str
    days: tuple[str, ...]
    series: dict[str, tuple[Decimal, ...]]  # value -> one amount per day of `days`
    report: CostReport


@dataclass(frozen=True, slots=True)
class BudgetLine:
    tenant: str
    budget_usd: Decimal | None
    spent_usd: Decimal  # month to date
    projected_usd: Decimal  # spent / elapsed share of the month

    @property
    def used_ratio(self) -> float | None:
        return float(self.spent_usd / self.budget_usd) if self.budget_usd else None


@dataclass(frozen=True, slots=True)
class SessionCost:
    tenant: str
    session_id: str
    num_calls: int
    cost_usd: Decimal
    uncached_cost_usd: Decimal
    first_ts: datetime
    last_ts: datetime


def spend_series(
    sessions: sessionmaker[Session], since: datetime, until: datetime, dimension: str
) -> SpendSeries:
    if dimension not in SPEND_DIMENSIONS:
        raise InvalidReportQuery(
            f"dimension: unknown dimension {dimension[:40]!r}; use {'|'.join(SPEND_DIMENSIONS)}",
            "dimension",
        )
    report = _by_day(sessions, since, until, dimension)
    days = tuple(sorted({row.group[0] for row in report.rows}))
    position = {day: i for i, day in enumerate(days)}
    values = {row.group[1] for row in report.rows}
    check_view_size(len(days) * len(values), "amounts (days × values)")  # what is sent
    amounts: dict[str, list[Decimal]] = {}
    for row in report.rows:
        day, value = row.group
        amounts.setdefault(value, [Decimal(0)] * len(days))[position[day]] = row.cost_usd
    return SpendSeries(dimension, days, {k: tuple(v) for k, v in amounts.items()}, report)


def _by_day(
    sessions: sessionmaker[Session], since: datetime, until: datetime, dimension: str
) -> CostReport:
    """The report per (day, value of `dimension`); a key's value is `tenant/key id`, since a
    key id names a key within its tenant only (two tenants' `prod` are two keys)."""
    if dimension != "key":
        return cost_report(sessions, since, until, ["day", dimension])
    report = cost_report(sessions, since, until, ["day", "tenant", "key"])
    rows = tuple(
        replace(row, group=(row.group[0], f"{row.group[1]}/{row.group[2]}")) for row in report.rows
    )
    return replace(report, group_by=("day", "key"), rows=rows)


@dataclass(frozen=True, slots=True)
class ToolCallCount:
    """MCP tool calls (ledger door `mcp`) of one tool of one server: `sandbox` for a tenant's
    sandboxed tools. They cost nothing themselves; the count is what they show."""

    server: str
    tool: str  # as served: `<server>__<tool>` for an upstream server's
    num_calls: int


def tool_call_counts(
    sessions: sessionmaker[Session], since: datetime, until: datetime
) -> list[ToolCallCount]:
    """Tool calls over [since, until) by server and tool (every status: ok, error, rejected);
    not the rows of the sandboxed runs they started (kind `tool_run`)."""
    report = cost_report(sessions, since, until, ["kind", "backend", "model"])
    return [
        ToolCallCount(row.group[1], row.group[2], row.num_calls)
        for row in report.rows
        if row.group[0] == TOOL_CALL
    ]


def budget_lines(
    sessions: sessionmaker[Session], budgets: dict[str, Decimal | None], now: datetime
) -> list[BudgetLine]:
    """Every tenant with a budget or with spend this month: spent (what the budget counts:
    tool runs are not), budget, projection."""
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    spent = LedgerQueries(sessions).budget_spend_by_tenant(start, now) if start < now else {}
    days_in_month = calendar.monthrange(start.year, start.month)[1]
    elapsed = max((now - start).total_seconds(), 1.0) / (days_in_month * 86400)
    lines = []
    for tenant in sorted(set(budgets) | set(spent)):
        used = spent.get(tenant, to_money(0))
        projected = to_money(min(used / Decimal(str(elapsed)), Decimal(10) ** 9))
        lines.append(BudgetLine(tenant, budgets.get(tenant), used, projected))
    return lines


def top_sessions(
    sessions: sessionmaker[Session],
    since: datetime,
    until: datetime,
    limit: int = 20,
    offset: int = 0,
) -> list[SessionCost]:
    """The costliest sessions of the window, one page (at most MAX_PAGE rows)."""
    u = UsageRecord
    cost = sa.func.sum(u.cost_usd)
    query = (
        sa.select(
            u.tenant,
            u.session_id,
            sa.func.count(u.id),
            cost,
            sa.func.sum(u.uncached_cost_usd),
            sa.func.min(u.ts),
            sa.func.max(u.ts),
        )
        .where(u.ts >= since, u.ts < until, u.session_id.is_not(None))
        .group_by(u.tenant, u.session_id)
        .order_by(cost.desc(), u.tenant, u.session_id)
        .limit(min(max(limit, 1), MAX_PAGE))
        .offset(min(max(offset, 0), MAX_OFFSET))
    )
    with sessions() as session:
        rows = session.execute(query).all()
    return [_session_cost(row) for row in rows]


def spend_document(series: SpendSeries) -> dict[str, Any]:
    return {
        "dimension": series.dimension,
        "since": series.report.since.isoformat(),
        "until": series.report.until.isoformat(),
        "currency": "USD",
        "days": list(series.days),
        "series": {k: [str(v) for v in values] for k, values in series.series.items()},
        "total_usd": str(series.report.totals.cost_usd),
    }


def sessions_document(rows: Iterable[SessionCost]) -> list[dict[str, Any]]:
    return [
        {
            "tenant": r.tenant,
            "session_id": r.session_id,
            "num_calls": r.num_calls,
            "cost_usd": str(r.cost_usd),
            "uncached_cost_usd": str(r.uncached_cost_usd),
            "first": r.first_ts.isoformat(),
            "last": r.last_ts.isoformat(),
        }
        for r in rows
    ]


def _session_cost(row: Any) -> SessionCost:
    tenant, session_id, calls, cost, uncached, first, last = row
    return SessionCost(
        tenant,
        session_id,
        int(calls),
        to_money(cost or 0),
        to_money(uncached or 0),
        _aware(first),
        _aware(last),
    )


def _aware(value: datetime | str) -> datetime:
    """min/max over a UtcDateTime come back raw (naive, or text on SQLite): make them UTC."""
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
