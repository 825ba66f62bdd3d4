"""The budget alarm: once per tenant, month and process, when a tenant's spend crosses its
`budget_alarm_ratio`: a log line, a metric and the tenant's webhook.

Must not decide admission: it only reports what settled spend reached.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
from prometheus_client import Counter

from policies.limits import LimitsPolicy

log = logging.getLogger("lantern.admission")


class BudgetAlarm:
    """Webhook posts run as tasks in `background` (the owner waits for them on close); the
    alarms already raised are kept per tenant and month (one entry each)."""

    def __init__(
        self,
        alarms: Counter,
        background: set[asyncio.Future[Any]],
        http: httpx.AsyncClient | None,
        webhook_timeout_s: float,
    ) -> None:
        self._alarms = alarms
        self._background = background
        self._http = http
        self._webhook_timeout_s = webhook_timeout_s
        self._alarmed: set[tuple[str, str]] = set()

    def check(self, tenant: str, period: str, policy: LimitsPolicy, spend_usd: float) -> None:
        budget = policy.monthly_budget_usd
        if budget is None or spend_usd < budget * policy.budget_alarm_ratio:
            return
        if (tenant, period) in self._alarmed:
            return
        self._alarmed.add((tenant, period))
        self._alarms.labels(tenant).inc()
        log.warning(
            "budget alarm: tenant %s spent $%.6f of $%.2f in %s", tenant, spend_usd, budget, period
        )
        url = policy.budget_alarm_webhook
        if url is not None:
            body = {
                "tenant": tenant,
                "period": period,
                "spend_usd": spend_usd,
                "budget_usd": budget,
            }
            task = asyncio.create_task(self._post(url, body))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _post(self, url: str, body: dict[str, object]) -> None:
        try:
            if self._http is not None:
                response = await self._http.post(url, json=body, timeout=self._webhook_timeout_s)
            else:
                async with httpx.AsyncClient(timeout=self._webhook_timeout_s) as client:
                    response = await client.post(url, json=body)
            response.raise_for_status()
        except httpx.HTTPError:
            log.exception("budget alarm webhook %s failed", url)
