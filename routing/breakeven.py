"""Break-even arithmetic between a self-hosted fleet and a per-token API (reference note, F2).

Pure functions over plain aggregates; the ledger queries and the HTTP/CLI plumbing live in the
gateway. Nothing here reads a clock, a file or a database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Advice = Literal["scale_in", "scale_out", "stay"]


def u_star(replica_usd_per_h: float, api_usd_per_mtok: float, mtok_per_h_full: float) -> float:
    """The utilisation above which a replica is cheaper than the API for the same tokens.

    u* = replica $/h / (API $/Mtok x Mtok/h at full use). F2: 12 / (2.0 x 38.3) = 0.157.
    """
    if replica_usd_per_h < 0 or api_usd_per_mtok <= 0 or mtok_per_h_full <= 0:
        raise ValueError("prices and capacity must be positive")
    return replica_usd_per_h / (api_usd_per_mtok * mtok_per_h_full)


@dataclass(frozen=True, slots=True)
class ApiPrices:
    """Dollars per million tokens, by kind (litellm's price map or a policy override)."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cache_read_usd_per_mtok: float = 0.0
    cache_write_usd_per_mtok: float = 0.0


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Tokens of one venue over the report window, by kind (canonical `Usage` meanings)."""

    input_tokens: int = 0  # uncached prompt tokens
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def work_tokens(self) -> int:
        """Tokens a replica must compute: uncached prompt (incl. cache writes) and output."""
        return self.input_tokens + self.cache_write_tokens + self.output_tokens

    def api_cost_usd(self, prices: ApiPrices) -> float:
        return (
            self.input_tokens * prices.input_usd_per_mtok
            + self.output_tokens * prices.output_usd_per_mtok
            + self.cache_read_tokens * prices.cache_read_usd_per_mtok
            + self.cache_write_tokens * prices.cache_write_usd_per_mtok
        ) / 1e6

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True)
class ModelAggregates:
    """What the ledger and the config know about one model over a window of `hours`."""

    model: str
    hours: float
    replicas: int  # replicas provisioned over the window (average)
    replica_usd_per_h: float
    mtok_per_h_full: float  # work tokens one replica serves per hour at full use
    fleet: TokenCounts  # traffic served by the fleet
    api: TokenCounts  # traffic served by APIs (overflow, pinned tenants, fallbacks)
    api_prices: ApiPrices
    headroom_util: float = 0.65  # SLO headroom: target utilisation of a replica
    api_usd_per_mtok_blended: float | None = None  # override of the traffic-derived blend


@dataclass(frozen=True, slots=True)
class BreakevenReport:
    model: str
    hours: float
    replicas: int
    utilisation: float  # u: fleet work tokens / (replicas x hours x capacity)
    u_star: float
    api_usd_per_mtok_blended: float
    actual_cost_usd: float  # replicas' hours + what the API traffic cost
    all_api_cost_usd: float  # every token of both venues priced at the API
    all_fleet_cost_usd: float  # enough replicas at headroom for all traffic
    all_fleet_replicas: int
    advice: Advice
    formula: str
    reason: str


def _blended_price(agg: ModelAggregates, total: TokenCounts) -> float:
    """API $ per Mtok of work tokens, for the traffic mix actually seen (or the override)."""
    if agg.api_usd_per_mtok_blended is not None:
        return agg.api_usd_per_mtok_blended
    if total.work_tokens == 0:
        p = agg.api_prices
        return (p.input_usd_per_mtok + p.output_usd_per_mtok) / 2
    return total.api_cost_usd(agg.api_prices) * 1e6 / total.work_tokens


def _advice(u: float, ustar: float, agg: ModelAggregates, overflow_u: float) -> tuple[Advice, str]:
    """Scale in below u*, scale out when the API overflow alone would keep a replica above u*."""
    if agg.replicas > 0 and u < ustar:
        return "scale_in", f"u={u:.3f} < u*={ustar:.3f}: the fleet costs more than the API"
    if overflow_u >= max(ustar, 1e-12) and ustar < agg.headroom_util:
        return (
            "scale_out",
            f"API overflow would fill a replica to {overflow_u:.3f} >= u*={ustar:.3f}",
        )
    if agg.replicas > 0 and u > agg.headroom_util:
        return "scale_out", f"u={u:.3f} > headroom {agg.headroom_util:.2f}: TTFT SLO at risk"
    return "stay", f"u*={ustar:.3f} <= u={u:.3f} <= headroom {agg.headroom_util:.2f}"


def breakeven_report(agg: ModelAggregates) -> BreakevenReport:
    """Per-model utilisation, u*, actual/all-API/all-fleet costs and the advice, with the formula."""
    total = agg.fleet + agg.api
    blended = _blended_price(agg, total)
    ustar = u_star(agg.replica_usd_per_h, blended, agg.mtok_per_h_full)
    capacity_mtok = agg.replicas * agg.hours * agg.mtok_per_h_full
    u = agg.fleet.work_tokens / 1e6 / capacity_mtok if capacity_mtok > 0 else 0.0
    per_replica_mtok = agg.hours * agg.mtok_per_h_full
    overflow_u = agg.api.work_tokens / 1e6 / per_replica_mtok if per_replica_mtok > 0 else 0.0
    fleet_cost = agg.replicas * agg.hours * agg.replica_usd_per_h
    need = (
        total.work_tokens / 1e6 / (per_replica_mtok * agg.headroom_util) if per_replica_mtok else 0
    )
    all_fleet_replicas = max(1, math.ceil(need - 1e-9)) if total.work_tokens else 0
    advice, reason = _advice(u, ustar, agg, overflow_u)
    formula = (
        f"u* = replica $/h / (API $/Mtok x Mtok/h at full use)"
        f" = {agg.replica_usd_per_h:g} / ({blended:.3f} x {agg.mtok_per_h_full:g}) = {ustar:.3f};"
        f" u = fleet Mtok / (replicas x hours x Mtok/h) = {agg.fleet.work_tokens / 1e6:.3f}"
        f" / ({agg.replicas} x {agg.hours:g} x {agg.mtok_per_h_full:g}) = {u:.3f}"
    )
    return BreakevenReport(
        model=agg.model,
        hours=agg.hours,
        replicas=agg.replicas,
        utilisation=u,
        u_star=ustar,
        api_usd_per_mtok_blended=blended,
        actual_cost_usd=fleet_cost + agg.api.api_cost_usd(agg.api_prices),
        all_api_cost_usd=total.api_cost_usd(agg.api_prices),
        all_fleet_cost_usd=all_fleet_replicas * agg.hours * agg.replica_usd_per_h,
        all_fleet_replicas=all_fleet_replicas,
        advice=advice,
        formula=formula,
        reason=reason,
    )


def format_breakeven(reports: tuple[BreakevenReport, ...] | list[BreakevenReport]) -> str:
    """Plain-text table for `lantern report breakeven`, one block per model."""
    lines: list[str] = []
    for r in reports:
        lines += [
            f"model {r.model}: {r.replicas} replica(s) over {r.hours:g} h",
            f"  utilisation u = {r.utilisation:.3f}   break-even u* = {r.u_star:.3f}",
            f"  cost: actual ${r.actual_cost_usd:,.2f}   all-API ${r.all_api_cost_usd:,.2f}"
            f"   all-fleet ${r.all_fleet_cost_usd:,.2f} ({r.all_fleet_replicas} replica(s))",
            f"  advice: {r.advice.replace('_', ' ')} ({r.reason})",
            f"  {r.formula}",
        ]
    return "\n".join(lines)
