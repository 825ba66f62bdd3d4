"""Cost reports for finance and the break-even report, from the usage ledger.

Builds frozen report data (`CostReport`) and the `lantern report ...` CLI handlers; text, CSV and
JSON rendering is in `gateway/reports/format.py`. Sync database I/O: async callers use a thread.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.queries import GROUP_KEYS, LedgerQueries, UsageTotals
from gateway.reports.focus import FOCUS_GROUP_BY, to_focus_csv
from gateway.reports.format import render, report_document, to_csv, to_json, to_table

__all__ = [
    "CostReport",
    "CostRow",
    "InvalidReportQuery",
    "add_cost_arguments",
    "cli_breakeven",
    "cli_cost",
    "cost_report",
    "parse_group_by",
    "parse_period",
    "render",
    "report_document",
    "to_csv",
    "to_json",
    "to_table",
]

if TYPE_CHECKING:
    from gateway.settings import Settings

REPORT_FORMATS = ("table", "csv", "json")
COST_FORMATS = (*REPORT_FORMATS, "focus")  # focus: FinOps FOCUS 1.0 CSV, one row per day+key
DEFAULT_GROUP_BY = ("tenant",)


class InvalidReportQuery(ValueError):
    """A report parameter is wrong (unknown group key, bad date, empty window): HTTP 400."""


class LedgerSettings(Protocol):
    database_url: str


@dataclass(frozen=True, slots=True)
class CostRow:
    group: tuple[str, ...]  # values of the report's group-by keys, in order
    num_calls: int
    input_tokens: int  # uncached prompt tokens
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: Decimal
    uncached_cost_usd: Decimal  # the same tokens priced with no prompt cache

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cache_hit_ratio(self) -> float:
        """Cache-read share of all prompt tokens (0.0 when there were none)."""
        return self.cache_read_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def saved_usd(self) -> Decimal:
        """What caching saved; negative when cache writes were never read back enough."""
        return self.uncached_cost_usd - self.cost_usd


@dataclass(frozen=True, slots=True)
class CostReport:
    since: datetime
    until: datetime  # exclusive
    group_by: tuple[str, ...]
    rows: tuple[CostRow, ...]
    totals: CostRow


def cost_report(
    sessions: sessionmaker[Session], since: datetime, until: datetime, group_by: Sequence[str]
) -> CostReport:
    """Cost, tokens by kind, cache hit ratio and savings over [since, until), per group."""
    keys = parse_group_by(group_by)
    totals = LedgerQueries(sessions).usage_totals(since, until, keys)
    rows = tuple(_cost_row(t) for t in totals)
    return CostReport(since, until, keys, rows, _sum_rows(rows))


def parse_group_by(values: Sequence[str] | None) -> tuple[str, ...]:
    """Keys from repeated and/or comma-separated values, in order, without repeats."""
    keys: list[str] = []
    for value in values or ():
        for key in (part.strip() for part in value.split(",")):
            if key not in GROUP_KEYS:
                raise InvalidReportQuery(
                    f"unknown group-by key {key!r}; use {'|'.join(GROUP_KEYS)}"
                )
            if key not in keys:
                keys.append(key)
    return tuple(keys)


def parse_period(since: str | None, until: str | None, now: datetime) -> tuple[datetime, datetime]:
    """[since, until) in UTC. Defaults: the first of `now`'s month, and `now`. A date-only
    `until` includes that whole day; times without an offset are UTC."""
    start = _parse_instant(since, "since") if since else _month_start(now)
    if until is None:
        end = now.astimezone(UTC)
    elif _is_date_only(until):
        end = _parse_instant(until, "until") + timedelta(days=1)
    else:
        end = _parse_instant(until, "until")
    if start >= end:
        raise InvalidReportQuery(
            f"since ({start.isoformat()}) must be before until ({end.isoformat()})"
        )
    return start, end


def cli_cost(args: argparse.Namespace, settings: LedgerSettings) -> int:
    """`lantern report cost`: args.since, args.until, args.group_by (list; default by tenant),
    args.format."""
    try:
        since, until = parse_period(args.since, args.until, datetime.now(UTC))
        group_by = parse_group_by(args.group_by) if args.group_by else DEFAULT_GROUP_BY
        if args.format not in COST_FORMATS:
            raise InvalidReportQuery(
                f"unknown format {args.format!r}; use {'|'.join(COST_FORMATS)}"
            )
        if args.format == "focus":
            group_by = FOCUS_GROUP_BY
    except InvalidReportQuery as error:
        print(f"lantern report cost: {error}", file=sys.stderr)
        return 2
    engine = create_ledger_engine(settings.database_url)
    try:
        report = cost_report(session_factory(engine), since, until, group_by)
    except SQLAlchemyError as error:
        print(
            f"lantern report cost: cannot read the ledger ({type(error).__name__}): "
            "is the database up and migrated?",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    sys.stdout.write(
        to_focus_csv(report) if args.format == "focus" else render(report, args.format)
    )
    return 0


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags `cli_cost` reads, for the `lantern report cost` sub-parser."""
    parser.add_argument(
        "--since", help="ISO date or datetime (default: month to date: the 1st of this month, UTC)"
    )
    parser.add_argument("--until", help="ISO date (inclusive) or datetime (exclusive); default now")
    parser.add_argument(
        "--group-by",
        dest="group_by",
        action="append",
        default=None,
        help=f"{'|'.join(GROUP_KEYS)}; repeat or comma-separate for several (default: tenant)",
    )
    parser.add_argument("--format", choices=COST_FORMATS, default="table")


def cli_breakeven(args: argparse.Namespace, settings: Settings) -> int:
    """`lantern report breakeven` (gateway/reports/breakeven.py; imported on use because it loads
    LiteLLM's price map, which takes seconds)."""
    from gateway.reports.breakeven import run_breakeven

    return run_breakeven(args, settings)


def _cost_row(t: UsageTotals) -> CostRow:
    return CostRow(
        t.group,
        t.num_calls,
        t.input_tokens,
        t.cache_read_tokens,
        t.cache_write_tokens,
        t.output_tokens,
        t.cost_usd,
        t.uncached_cost_usd,
    )


def _sum_rows(rows: tuple[CostRow, ...]) -> CostRow:
    return CostRow(
        group=(),
        num_calls=sum(r.num_calls for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        cache_read_tokens=sum(r.cache_read_tokens for r in rows),
        cache_write_tokens=sum(r.cache_write_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost_usd=sum((r.cost_usd for r in rows), Decimal(0)),
        uncached_cost_usd=sum((r.uncached_cost_usd for r in rows), Decimal(0)),
    )


def _month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _is_date_only(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _parse_instant(text: str, name: str) -> datetime:
    try:
        if _is_date_only(text):
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError as error:
        raise InvalidReportQuery(f"{name}: {text!r} is not an ISO date or datetime") from error
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
