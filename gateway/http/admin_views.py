"""The JSON views behind `/admin/*`: the policy snapshot and the cost and break-even reports.

`gateway/http/admin_routes.py` guards them with the admin token; the reports run in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from fastapi import Request

from gateway.ledger.db import session_factory
from gateway.reports.rows import InvalidReportQuery, check_view_size
from gateway.settings import Settings
from policies.store import PolicyStore

JsonView = Callable[[Request], Awaitable[Any]]


def build_admin_views(settings: Settings, keys: PolicyStore, engine: Any) -> dict[str, JsonView]:
    from gateway.reports.breakeven import (
        api_prices_from_settings,
        breakeven_reports,
        fleets_from_settings,
    )
    from gateway.reports.cost import cost_report, parse_group_by, parse_period
    from gateway.reports.format import report_document

    sessions = session_factory(engine)

    async def policy(_: Request) -> Any:
        return keys.snapshot()

    async def cost(request: Request) -> Any:
        q = request.query_params
        since, until = parse_period(q.get("since"), q.get("until"), datetime.now(UTC))
        group_by = parse_group_by(q.getlist("group_by") or ["tenant"])
        if "session" in group_by:  # one row per session the clients named: no bound
            raise InvalidReportQuery(
                "group_by: session has no bound here; page through /admin/reports/sessions",
                "group_by",
            )
        report = await asyncio.to_thread(cost_report, sessions, since, until, group_by)
        check_view_size(len(report.rows))
        return report_document(report)

    async def breakeven(request: Request) -> Any:
        q = request.query_params
        since, until = parse_period(q.get("since"), q.get("until"), datetime.now(UTC))
        fleets = fleets_from_settings(settings)
        prices = api_prices_from_settings(settings, fleets)
        reports, notes = await asyncio.to_thread(
            breakeven_reports, sessions, since, until, fleets, prices
        )
        return {
            "since": since.isoformat(),
            "until": until.isoformat(),
            "models": [dataclasses.asdict(r) for r in reports],
            "notes": notes,
        }

    views = {"policy": policy, "reports/cost": cost, "reports/breakeven": breakeven}
    return {**views, **_spend_views(sessions, keys)}


def _spend_views(sessions: Any, keys: PolicyStore) -> dict[str, JsonView]:
    """The console's spend views as JSON (gateway/reports/spend.py: one source for both)."""
    from gateway.reports.cost import parse_period
    from gateway.reports.spend import (
        budget_lines,
        sessions_document,
        spend_document,
        spend_series,
        top_sessions,
    )

    async def spend(request: Request) -> Any:
        q = request.query_params
        since, until = parse_period(q.get("since"), q.get("until"), datetime.now(UTC))
        dimension = q.get("dimension", "tenant")
        series = await asyncio.to_thread(spend_series, sessions, since, until, dimension)
        return spend_document(series)

    async def top(request: Request) -> Any:
        q = request.query_params
        since, until = parse_period(q.get("since"), q.get("until"), datetime.now(UTC))
        limit, offset = _whole_number(q, "limit", 20), _whole_number(q, "offset", 0)
        rows = await asyncio.to_thread(top_sessions, sessions, since, until, limit, offset)
        return {
            "since": since.isoformat(),
            "until": until.isoformat(),
            "sessions": sessions_document(rows),
        }

    async def budgets(_: Request) -> Any:
        limits = {e.tenant: e.policy.limits.monthly_budget_usd for e in keys.snapshot().tenants}
        wanted = {t: Decimal(str(b)) if b is not None else None for t, b in limits.items()}
        lines = await asyncio.to_thread(budget_lines, sessions, wanted, datetime.now(UTC))
        return [
            {"tenant": b.tenant, "budget_usd": str(b.budget_usd) if b.budget_usd is not None else None,
             "spent_usd": str(b.spent_usd), "projected_usd": str(b.projected_usd)}
            for b in lines
        ]  # fmt: skip

    return {"reports/spend": spend, "reports/sessions": top, "reports/budgets": budgets}


def _whole_number(query: Any, name: str, default: int) -> int:
    """`?name=` as a count: ASCII digits, at most 12 of them (the view caps it further)."""
    text = query.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 12):
        raise InvalidReportQuery(f"{name}: a whole number, got {text[:40]!r}", name)
    return int(text)
