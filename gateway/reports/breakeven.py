"""`lantern report breakeven`: the note's F2 arithmetic (routing.breakeven) over the ledger's
fleet and API traffic, with fleets and prices from lantern.yaml. CLI only; sync database I/O.

A replica's capacity (Mtok/h at full use) comes from `--mtok-per-h`, else `capacity_tok_s` in
lantern.yaml, else the busiest hour the fleet served (a lower bound, and the output says so).
Replicas are charged for the hours they served (UTC hours with fleet traffic), not for the whole
window; u and u* are reported in [0, 1] (u* above 1 means the fleet never pays at these prices).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gateway.core.models_table import RoutePricing
from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.queries import HourlyModelTokens, LedgerQueries
from gateway.reports.rows import REPORT_FORMATS, InvalidReportQuery, parse_period
from gateway.settings import Settings
from routing.breakeven import (
    ApiPrices,
    BreakevenReport,
    ModelAggregates,
    TokenCounts,
    breakeven_report,
    format_breakeven,
)

SELF_HOSTED_KINDS = ("selfhost", "openai_compatible")


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """What the configuration knows about a model's self-hosted fleet."""

    replicas: int
    replica_usd_per_h: float
    mtok_per_h_full: float | None = None  # None: estimate from the busiest fleet hour
    headroom_util: float = 0.65


def fleets_from_settings(settings: Settings) -> dict[str, FleetSpec]:
    """Per model: the replicas of its priced self-hosted backends (`price_per_hour_usd`); a
    replica's full-use capacity from `capacity_tok_s` when configured (the slowest, if several)."""
    fleets: dict[str, FleetSpec] = {}
    for route in settings.models:
        priced = [
            b
            for b in route.backends
            if b.kind in SELF_HOSTED_KINDS and b.price_per_hour_usd is not None
        ]
        if priced:
            replicas = sum(max(1, len(b.base_urls())) for b in priced)
            usd_per_h = sum(
                (b.price_per_hour_usd or 0.0) * max(1, len(b.base_urls())) for b in priced
            )
            capacities = [b.capacity_tok_s for b in priced if b.capacity_tok_s is not None]
            mtok_per_h = min(capacities) * 3600 / 1e6 if capacities else None
            fleets[route.name] = FleetSpec(replicas, usd_per_h / replicas, mtok_per_h)
    return fleets


def api_prices_from_settings(settings: Settings, models: Iterable[str]) -> dict[str, ApiPrices]:
    """USD per Mtok of each model at its API price (overrides, else LiteLLM's map)."""
    pricing = RoutePricing.from_settings(settings)
    prices = {}
    for model in models:
        p = pricing.price(model)
        prices[model] = ApiPrices(
            float(p.input * 10**6),
            float(p.output * 10**6),
            float(p.cache_read * 10**6),
            float(p.cache_write * 10**6),
        )
    return prices


def breakeven_reports(
    sessions: sessionmaker[Session],
    since: datetime,
    until: datetime,
    fleets: Mapping[str, FleetSpec],
    prices: Mapping[str, ApiPrices],
) -> tuple[list[BreakevenReport], list[str]]:
    """(one report per model of `fleets`, notes on estimated or missing capacities)."""
    hourly = LedgerQueries(sessions).hourly_model_tokens(since, until)
    return reports_from_hourly(hourly, fleets, prices)


def breakeven_by_day(
    sessions: sessionmaker[Session],
    since: datetime,
    until: datetime,
    fleets: Mapping[str, FleetSpec],
    prices: Mapping[str, ApiPrices],
) -> list[tuple[str, list[BreakevenReport]]]:
    """(UTC day, the reports of that day) for each day with traffic: u against u* over time."""
    hourly = LedgerQueries(sessions).hourly_model_tokens(since, until)
    days = sorted({h.hour.date().isoformat() for h in hourly})
    return [
        (
            day,
            reports_from_hourly(
                [h for h in hourly if h.hour.date().isoformat() == day], fleets, prices
            )[0],
        )
        for day in days
    ]


def reports_from_hourly(
    hourly: list[HourlyModelTokens],
    fleets: Mapping[str, FleetSpec],
    prices: Mapping[str, ApiPrices],
) -> tuple[list[BreakevenReport], list[str]]:
    reports: list[BreakevenReport] = []
    notes: list[str] = []
    for model, fleet in sorted(fleets.items()):
        rows = [h for h in hourly if h.model == model]
        fleet_rows = [r for r in rows if r.venue == "fleet"]
        capacity = fleet.mtok_per_h_full
        if capacity is None:
            capacity = max((_work_mtok([r]) for r in fleet_rows), default=0.0) / fleet.replicas
            if capacity <= 0:
                notes.append(f"{model}: no fleet traffic to estimate capacity; pass --mtok-per-h")
                continue
            notes.append(
                f"{model}: capacity {capacity:.4g} Mtok/h per replica is the busiest "
                "hour served (a lower bound); pass --mtok-per-h for the real one"
            )
        served_hours = len({r.hour for r in fleet_rows})
        aggregates = ModelAggregates(
            model=model,
            hours=float(served_hours),
            replicas=fleet.replicas,
            replica_usd_per_h=fleet.replica_usd_per_h,
            mtok_per_h_full=capacity,
            fleet=_token_counts(fleet_rows),
            api=_token_counts(r for r in rows if r.venue == "api"),
            api_prices=prices[model],
            headroom_util=fleet.headroom_util,
        )
        reports.append(bounded(breakeven_report(aggregates)))
        if served_hours == 0:
            notes.append(f"{model}: the fleet served no hour in the window; no replica cost")
    return reports, notes


def bounded(report: BreakevenReport) -> BreakevenReport:
    """u and u* clipped to [0, 1]: a u* above 1 means no utilisation makes the fleet pay, and
    the reason says so (the formula keeps the unclipped arithmetic)."""
    if report.u_star <= 1 and report.utilisation <= 1:
        return report
    reason = report.reason
    if report.u_star > 1:
        reason = f"u*={report.u_star:.3g} > 1: the fleet never pays at these prices; {reason}"
    return dataclasses.replace(
        report,
        utilisation=min(report.utilisation, 1.0),
        u_star=min(report.u_star, 1.0),
        reason=reason,
    )


def run_breakeven(args: argparse.Namespace, settings: Settings) -> int:
    """args: since, until, format; optional model (one model only), mtok_per_h, headroom."""
    try:
        since, until = parse_period(args.since, args.until, datetime.now(UTC))
    except InvalidReportQuery as error:
        print(f"lantern report breakeven: {error}", file=sys.stderr)
        return 2
    problem = check_breakeven_options(args)
    all_fleets = fleets_from_settings(settings)
    fleets = _chosen_fleets(args, all_fleets)
    model = getattr(args, "model", None)
    if problem is None and model is not None and model not in all_fleets:
        problem = f"--model {model!r} has no priced fleet; use one of: {', '.join(all_fleets)}"
    if problem is None and not fleets:
        problem = (
            "no model has a self-hosted backend (selfhost or openai_compatible) with "
            "price_per_hour_usd in lantern.yaml (pass --config FILE, or --demo for make run's)"
        )
    if problem is not None:
        print(f"lantern report breakeven: {problem}", file=sys.stderr)
        return 2
    engine = create_ledger_engine(settings.database_url)
    try:
        prices = api_prices_from_settings(settings, fleets)
        reports, notes = breakeven_reports(session_factory(engine), since, until, fleets, prices)
    except SQLAlchemyError as error:
        print(
            f"lantern report breakeven: cannot read the ledger ({type(error).__name__})",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    sys.stdout.write(render_breakeven(reports, getattr(args, "format", "table")))
    return 0


def render_breakeven(reports: list[BreakevenReport], fmt: str) -> str:
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "json":
        return json.dumps([asdict(r) for r in reports], indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        names = list(BreakevenReport.__dataclass_fields__)
        writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
        writer.writeheader()
        writer.writerows(asdict(r) for r in reports)
        return out.getvalue()
    return format_breakeven(reports) + "\n"


def add_breakeven_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--since", help="ISO date or datetime (default: first of this month, UTC)")
    parser.add_argument("--until", help="ISO date (inclusive) or datetime (exclusive); default now")
    parser.add_argument("--format", choices=REPORT_FORMATS, default="table")
    parser.add_argument("--model", help="only this model (default: every model with a fleet)")
    parser.add_argument(
        "--mtok-per-h",
        dest="mtok_per_h",
        type=float,
        help="million work tokens one replica serves per hour at full use",
    )
    parser.add_argument("--headroom", type=float, help="target utilisation (default 0.65)")


def check_breakeven_options(args: argparse.Namespace) -> str | None:
    """What is wrong with --mtok-per-h or --headroom, or None."""
    mtok_per_h = getattr(args, "mtok_per_h", None)
    headroom = getattr(args, "headroom", None)
    if mtok_per_h is not None and not mtok_per_h > 0:
        return f"--mtok-per-h must be a number > 0 (got {mtok_per_h})"
    if headroom is not None and not 0 < headroom <= 1:
        return f"--headroom must be in (0, 1] (got {headroom})"
    return None


def _chosen_fleets(args: argparse.Namespace, fleets: dict[str, FleetSpec]) -> dict[str, FleetSpec]:
    model = getattr(args, "model", None)
    mtok_per_h = getattr(args, "mtok_per_h", None)
    headroom = getattr(args, "headroom", None)
    chosen = {m: f for m, f in fleets.items() if model is None or m == model}
    return {
        m: FleetSpec(
            f.replicas,
            f.replica_usd_per_h,
            mtok_per_h if mtok_per_h is not None else f.mtok_per_h_full,
            headroom if headroom is not None else f.headroom_util,
        )
        for m, f in chosen.items()
    }


def _work_mtok(rows: Iterable[HourlyModelTokens]) -> float:
    return _token_counts(rows).work_tokens / 1e6


def _token_counts(rows: Iterable[HourlyModelTokens]) -> TokenCounts:
    total = TokenCounts()
    for r in rows:
        total += TokenCounts(
            r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens
        )
    return total
