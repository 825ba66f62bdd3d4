"""The JSON views behind `/admin/*`: the policy snapshot and the cost and break-even reports.

`gateway/http/admin_routes.py` guards them with the admin token; the reports run in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from gateway.ledger.db import session_factory
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
        report = await asyncio.to_thread(cost_report, sessions, since, until, group_by)
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

    return {"policy": policy, "reports/cost": cost, "reports/breakeven": breakeven}
