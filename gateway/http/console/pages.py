"""What each console page shows, gathered from gateway/reports (the functions the CLI and the
admin API use) and shaped as charts and tables for the templates. Sync: routes call these in a
thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from urllib.parse import urlencode

from sqlalchemy.orm import Session, sessionmaker

from gateway.apikeys.records import KeyRecords
from gateway.http.console.charts import bar_chart, line_chart
from gateway.reports.breakeven import (
    api_prices_from_settings,
    breakeven_by_day,
    breakeven_reports,
    fleets_from_settings,
)
from gateway.reports.format import display_money
from gateway.reports.rows import check_view_size, cost_report
from gateway.reports.spend import budget_lines, spend_series, tool_call_counts, top_sessions
from gateway.settings import Settings
from policies.store import PolicyStore

PAGE_SIZE = 25


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    totals: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Page:
    name: str
    title: str
    period: str
    charts: list[str] = field(default_factory=list)  # SVG markup built by charts.py (escaped)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    next_page: str | None = None  # the query of the next page, same period (a full page only)


@dataclass(frozen=True, slots=True)
class ConsoleData:
    sessions: sessionmaker[Session]
    policies: PolicyStore
    records: KeyRecords
    settings: Settings


def _period(since: datetime, until: datetime) -> str:
    return f"{since:%Y-%m-%d %H:%M} .. {until:%Y-%m-%d %H:%M} UTC"


def spend_page(data: ConsoleData, since: datetime, until: datetime, dimension: str) -> Page:
    series = spend_series(data.sessions, since, until, dimension)
    values = {k: [float(v) for v in vs] for k, vs in series.series.items()}
    chart = line_chart(f"spend per day by {dimension} (USD)", series.days, values)
    rows = sorted(series.report.rows, key=lambda r: r.group)
    by_value: dict[str, Decimal] = {}
    calls: dict[str, int] = {}
    for row in rows:
        by_value[row.group[1]] = by_value.get(row.group[1], Decimal(0)) + row.cost_usd
        calls[row.group[1]] = calls.get(row.group[1], 0) + row.num_calls
    table = Table(
        f"spend by {dimension}",
        (dimension, "calls", "cost $"),
        [(k, f"{calls[k]:,}", display_money(v)) for k, v in sorted(by_value.items())],
        (
            "TOTAL",
            f"{series.report.totals.num_calls:,}",
            display_money(series.report.totals.cost_usd),
        ),
    )
    tables = [table]
    tools = tool_call_counts(data.sessions, since, until)
    if tools:  # model calls above count them too, at $0: here they are by tool
        tables.append(
            Table(
                "tool calls (MCP) by server and tool",
                ("server", "tool", "calls"),
                [(t.server, t.tool, f"{t.num_calls:,}") for t in tools],
                ("TOTAL", "", f"{sum(t.num_calls for t in tools):,}"),
            )
        )
    return Page("spend", "Spend", _period(since, until), [chart], tables)


def budgets_page(data: ConsoleData, now: datetime) -> Page:
    budgets = {
        e.tenant: (
            Decimal(str(e.policy.limits.monthly_budget_usd))
            if e.policy.limits.monthly_budget_usd is not None
            else None
        )
        for e in data.policies.snapshot().tenants
    }
    lines = budget_lines(data.sessions, budgets, now)
    chart = bar_chart("month-to-date spend (USD)", [(b.tenant, float(b.spent_usd)) for b in lines])
    rows = [
        (
            b.tenant,
            display_money(b.budget_usd) if b.budget_usd is not None else "-",
            display_money(b.spent_usd),
            f"{b.used_ratio * 100:.1f} %" if b.used_ratio is not None else "-",
            display_money(b.projected_usd),
            "over" if b.budget_usd is not None and b.projected_usd > b.budget_usd else "",
        )
        for b in lines
    ]
    table = Table(
        "budget against spend, this month",
        ("tenant", "budget $", "spent $", "used", "projected $", "projection"),
        rows,
    )
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return Page("budgets", "Budgets", _period(start, now), [chart], [table])


def cache_page(data: ConsoleData, since: datetime, until: datetime) -> Page:
    report = cost_report(data.sessions, since, until, ["day"])  # a row a day, whatever the tenants
    check_view_size(len(report.rows))
    saved = {row.group[0]: float(row.saved_usd) for row in report.rows}
    chart = line_chart(
        "saved by the prompt cache per day (USD)", list(saved), {"saved": list(saved.values())}
    )
    totals = report.totals
    table = Table(
        "cache savings",
        ("cost $", "uncached $", "saved $", "hit %"),
        [
            (
                display_money(totals.cost_usd),
                display_money(totals.uncached_cost_usd),
                display_money(totals.saved_usd),
                f"{totals.cache_hit_ratio * 100:.1f}",
            )
        ],
    )
    return Page("cache", "Cache savings", _period(since, until), [chart], [table])


def sessions_page(data: ConsoleData, since: datetime, until: datetime, page: int) -> Page:
    found = top_sessions(data.sessions, since, until, PAGE_SIZE, page * PAGE_SIZE)
    chart = bar_chart(
        "top sessions by cost (USD)", [(s.session_id, float(s.cost_usd)) for s in found[:10]]
    )
    rows = [
        (
            s.tenant,
            s.session_id,
            f"{s.num_calls:,}",
            display_money(s.cost_usd),
            f"{s.last_ts:%Y-%m-%d %H:%M}",
        )
        for s in found
    ]
    table = Table(
        f"sessions, page {page + 1}", ("tenant", "session", "calls", "cost $", "last call"), rows
    )
    period = {"since": since.isoformat(), "until": until.isoformat()}
    following = "?" + urlencode({**period, "page": page + 2}) if len(found) == PAGE_SIZE else None
    return Page(
        "sessions", "Top sessions", _period(since, until), [chart], [table], next_page=following
    )


def breakeven_page(data: ConsoleData, since: datetime, until: datetime) -> Page:
    fleets = fleets_from_settings(data.settings)
    if not fleets:
        note = "no model has a self-hosted backend with price_per_hour_usd in lantern.yaml"
        return Page("breakeven", "Break-even", _period(since, until), notes=[note])
    prices = api_prices_from_settings(data.settings, fleets)
    reports, notes = breakeven_reports(data.sessions, since, until, fleets, prices)
    days = breakeven_by_day(data.sessions, since, until, fleets, prices)
    charts = []
    for model in sorted(fleets):
        points = [(day, r) for day, rs in days for r in rs if r.model == model]
        charts.append(
            line_chart(
                f"{model}: u against u* per day",
                [d for d, _ in points],
                {"u": [r.utilisation for _, r in points], "u*": [r.u_star for _, r in points]},
                unit="",
            )
        )
    rows = [
        (
            r.model,
            f"{r.hours:g}",
            f"{r.utilisation:.3f}",
            f"{r.u_star:.3f}",
            display_money(Decimal(str(round(r.actual_cost_usd, 8)))),
            display_money(Decimal(str(round(r.all_api_cost_usd, 8)))),
            display_money(Decimal(str(round(r.all_fleet_cost_usd, 8)))),
            r.advice.replace("_", " "),
        )
        for r in reports
    ]
    table = Table(
        "break-even per model",
        ("model", "served h", "u", "u*", "actual $", "all-API $", "all-fleet $", "advice"),
        rows,
    )
    formulas = [r.formula for r in reports]
    return Page(
        "breakeven", "Break-even", _period(since, until), charts, [table], [*notes, *formulas]
    )


def tenants_page(data: ConsoleData, now: datetime) -> Page:
    """Live keys only (`live()`: a tenant holds at most its bound of them); the revoked and
    expired ones kept until pruned are counted, not loaded."""
    snapshot = data.policies.snapshot()
    issued: dict[str, list[str]] = {}
    for key in sorted(data.records.live(), key=lambda k: k.key_id):
        issued.setdefault(key.tenant, []).append(key.key_id)
    kept = data.records.num_kept()
    spent = {b.tenant: b.spent_usd for b in budget_lines(data.sessions, {}, now)}
    rows = []
    for entry in snapshot.tenants:
        p, limits = entry.policy, entry.policy.limits
        rows.append(
            (
                entry.tenant,
                ", ".join(p.models) or "all",
                f"{limits.tokens_per_minute or '-'} tok/min, {limits.requests_per_minute or '-'} req/min",
                str(limits.monthly_budget_usd if limits.monthly_budget_usd is not None else "-"),
                ", ".join([k.id for k in p.api_keys] + issued.get(entry.tenant, [])),
                f"{kept.get(entry.tenant, 0):,}",
                display_money(spent.get(entry.tenant, Decimal(0))),
            )
        )
    errors = [(e.file, str(e.line), e.field, e.reason) for e in snapshot.errors]
    return Page(
        "tenants",
        "Tenants",
        f"policy version {snapshot.version}",
        tables=[
            Table(
                "tenants",
                (
                    "tenant",
                    "models",
                    "limits",
                    "budget $",
                    "keys",
                    "revoked/expired kept",
                    "spent this month $",
                ),
                rows,
            ),
            Table(
                "policy errors (the last good policy stays in force)",
                ("file", "line", "field", "reason"),
                errors,
            ),
        ],
    )
