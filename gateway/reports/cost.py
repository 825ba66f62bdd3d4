"""The `lantern report cost` and `lantern report breakeven` CLI handlers, and the one import of
cost reports for their readers: data and query in `rows.py`, text, CSV and JSON in `format.py`,
FinOps FOCUS in `focus.py`.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.queries import GROUP_KEYS
from gateway.reports.focus import FOCUS_GROUP_BY, to_focus_csv
from gateway.reports.format import render, report_document, to_csv, to_json, to_table
from gateway.reports.rows import (
    COST_FORMATS,
    DEFAULT_GROUP_BY,
    REPORT_FORMATS,
    CostReport,
    CostRow,
    InvalidReportQuery,
    LedgerSettings,
    cost_report,
    parse_group_by,
    parse_period,
)
from gateway.settings import Settings

__all__ = [
    "REPORT_FORMATS",
    "CostReport",
    "CostRow",
    "InvalidReportQuery",
    "LedgerSettings",
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


def cli_cost(args: argparse.Namespace, settings: LedgerSettings) -> int:
    """`lantern report cost`: args.since, args.until, args.group_by (list; default by tenant),
    args.format."""
    try:
        since, until = parse_period(args.since, args.until, datetime.now(UTC))
        group_by = parse_group_by(args.group_by) if args.group_by else DEFAULT_GROUP_BY
        if args.format not in COST_FORMATS:
            raise InvalidReportQuery(
                f"unknown format {args.format!r}; use {'|'.join(COST_FORMATS)}", "format"
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
