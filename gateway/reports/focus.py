"""A FinOps FOCUS 1.0 export of the ledger: one charge row per UTC day, tenant, key, model and
backend, with every column the specification marks Mandatory plus the resource and usage columns
that apply to token charges. Pure rendering over `CostReport` rows; no database access here.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gateway.ledger.tool_runs import TOOL_RUN_BACKEND
from gateway.reports.rows import CostReport, CostRow

# FOCUS 1.0, columns whose requirement level is Mandatory (the specification's column index)
FOCUS_MANDATORY_COLUMNS: tuple[str, ...] = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)
# Conditional and Recommended columns this export fills (Tags as a JSON object, per the spec)
FOCUS_EXTRA_COLUMNS: tuple[str, ...] = (
    "ChargeFrequency",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "SkuId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)
FOCUS_COLUMNS = FOCUS_MANDATORY_COLUMNS + FOCUS_EXTRA_COLUMNS
FOCUS_GROUP_BY = ("day", "tenant", "key", "model", "backend")
# the backend of a tool run's row (`sandbox:local`, `sandbox:fargate`): the rollup FOCUS reads
# has no kind, and a tool run is a compute charge counted in runs, not a token charge
_TOOL_RUN_PREFIX = TOOL_RUN_BACKEND.split("{", 1)[0]


@dataclass(frozen=True, slots=True)
class FocusIssuer:
    """Who bills: the organisation running Lantern (its name goes into the issuer columns)."""

    name: str = "Lantern"
    account_id: str = "lantern"


def focus_rows(report: CostReport, issuer: FocusIssuer = FocusIssuer()) -> list[dict[str, str]]:
    """One FOCUS row per group of a report grouped by `FOCUS_GROUP_BY`."""
    if report.group_by != FOCUS_GROUP_BY:
        raise ValueError(f"a FOCUS export needs a report grouped by {FOCUS_GROUP_BY}")
    return [_focus_row(report, row, issuer) for row in report.rows]


def to_focus_csv(report: CostReport, issuer: FocusIssuer = FocusIssuer()) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(focus_rows(report, issuer))
    return out.getvalue()


def _focus_row(report: CostReport, row: CostRow, issuer: FocusIssuer) -> dict[str, str]:
    day, tenant, key, model, backend = row.group
    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    charge_start = max(start, report.since)
    charge_end = min(start + timedelta(days=1), report.until)
    cost = f"{row.cost_usd:.8f}"
    quantity, unit = str(row.prompt_tokens + row.output_tokens), "Tokens"
    what, category, service = "tokens", "AI and Machine Learning", "Lantern LLM gateway"
    if backend.startswith(_TOOL_RUN_PREFIX):
        quantity, unit = str(row.num_calls), "Runs"
        what, category, service = "tool runs", "Compute", "Lantern tool sandbox"
    return {
        "BilledCost": cost,
        "BillingAccountId": issuer.account_id,
        "BillingAccountName": issuer.name,
        "BillingCurrency": "USD",
        "BillingPeriodStart": _instant(report.since),
        "BillingPeriodEnd": _instant(report.until),
        "ChargeCategory": "Usage",
        "ChargeClass": "",  # empty: a regular charge, not a correction
        "ChargeDescription": f"{model} {what} via {backend} for tenant {tenant}",
        "ChargePeriodStart": _instant(charge_start),
        "ChargePeriodEnd": _instant(charge_end),
        "ContractedCost": cost,
        "EffectiveCost": cost,
        "InvoiceIssuerName": issuer.name,
        "ListCost": f"{row.uncached_cost_usd:.8f}",  # the same usage at list (uncached) prices
        "PricingQuantity": quantity,
        "PricingUnit": unit,
        "ProviderName": issuer.name,
        "PublisherName": backend,
        "ServiceCategory": category,
        "ServiceName": service,
        "ChargeFrequency": "Usage-Based",
        "ConsumedQuantity": quantity,
        "ConsumedUnit": unit,
        "ResourceId": f"{tenant}/{key}",
        "ResourceName": key,
        "ResourceType": "API key",
        "SkuId": model,
        "SubAccountId": tenant,
        "SubAccountName": tenant,
        "Tags": json.dumps({"lantern_backend": backend, "lantern_calls": str(row.num_calls)}),
    }


def _instant(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
