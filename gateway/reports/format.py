"""Text renderings of a `CostReport`: an aligned table for people, CSV and JSON for tools.

Money is exact: CSV carries 8 decimals (the ledger's precision), JSON numbers print the exact
decimal, the table shows cents for amounts of a dollar or more and the significant digits of
smaller ones (`display_money`). Every format carries the period and a totals row.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import ROUND_HALF_UP, Decimal

from gateway.reports.rows import CostReport, CostRow

_CENT = Decimal("0.01")
# 1 h cache writes are among the cache writes, reasoning tokens among the output tokens
_COUNTS = (
    "num_calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
)
_MONEY = ("cost_usd", "uncached_cost_usd", "saved_usd")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_TABLE_HEADERS = (
    "calls",
    "input",
    "cache read",
    "cache write",
    "1h write",
    "output",
    "reasoning",
    "hit %",
    "cost $",
    "uncached $",
    "saved $",
)


def render(report: CostReport, fmt: str) -> str:
    if fmt == "csv":
        return to_csv(report)
    if fmt == "json":
        return to_json(report)
    return to_table(report)


def display_money(value: Decimal) -> str:
    """Dollars for people: cents from $1 up (`1,234.57`), else up to 4 significant digits so a
    small amount never reads as zero (`0.000123`); zero is `0.00`."""
    if value == 0:
        return "0.00"
    if abs(value) >= 1:
        return f"{value.quantize(_CENT, ROUND_HALF_UP):,.2f}"
    digits = max(2, -abs(value).adjusted() + 3)
    text = f"{value:.{min(digits, 8)}f}".rstrip("0")
    return text if len(text.split(".")[1]) >= 2 else f"{value:.2f}"


def to_csv(report: CostReport) -> str:
    """One line per group and a last `TOTAL` line; every line names the period
    (`period_start`, `period_end`, UTC, end exclusive) so a file stands on its own."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["period_start", "period_end", *report.group_by, *_COUNTS, "cache_hit_ratio", *_MONEY]
    )
    period = [report.since.isoformat(), report.until.isoformat()]
    total_label = ["TOTAL", *([""] * (len(report.group_by) - 1))] if report.group_by else []
    for group, row in [*((r.group, r) for r in report.rows), (tuple(total_label), report.totals)]:
        writer.writerow(
            [
                *period,
                *(_csv_text(value) for value in group),
                *(getattr(row, name) for name in _COUNTS),
                f"{row.cache_hit_ratio:.4f}",
                *(f"{getattr(row, name):.8f}" for name in _MONEY),
            ]
        )
    return out.getvalue()


def _csv_text(value: str) -> str:
    """A text cell no spreadsheet runs as a formula: one that starts like a formula gets a
    leading `'` (OWASP's advice on CSV injection). Session ids are the clients' to choose, and
    these files are opened by finance in a spreadsheet."""
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def to_json(report: CostReport) -> str:
    return json.dumps(report_document(report), indent=2) + "\n"


def report_document(report: CostReport) -> dict[str, object]:
    """The JSON document of a report (the body of GET /admin/reports/cost)."""
    return {
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "currency": "USD",
        "group_by": list(report.group_by),
        "rows": [_row_document(row, report.group_by) for row in report.rows],
        "totals": _row_document(report.totals, ()),
    }


def to_table(report: CostReport) -> str:
    header = [*report.group_by, *_TABLE_HEADERS]
    body = [_table_cells(row) for row in report.rows]
    total_label = ["TOTAL", *([""] * (len(report.group_by) - 1))] if report.group_by else []
    total = [*total_label, *_table_cells(report.totals)]
    widths = [max(len(line[i]) for line in (header, *body, total)) for i in range(len(header))]
    num_keys = len(report.group_by)

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i < num_keys else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    title = f"cost report {report.since.isoformat()} .. {report.until.isoformat()} (UTC, until exclusive)"
    groups = (
        [*(line(c) for c in body), rule] if report.group_by else []
    )  # else: one line, the total
    return "\n".join([title, line(header), rule, *groups, line(total)]) + "\n"


def _table_cells(row: CostRow) -> list[str]:
    return [
        *row.group,
        *(f"{getattr(row, name):,}" for name in _COUNTS),
        f"{row.cache_hit_ratio * 100:.1f}",
        *(display_money(getattr(row, name)) for name in _MONEY),
    ]


def _row_document(row: CostRow, group_by: tuple[str, ...]) -> dict[str, object]:
    return {
        **dict(zip(group_by, row.group, strict=True)),
        **{name: getattr(row, name) for name in _COUNTS},
        "prompt_tokens": row.prompt_tokens,
        "cache_hit_ratio": round(row.cache_hit_ratio, 6),
        **{name: _json_money(getattr(row, name)) for name in _MONEY},
    }


def _json_money(value: Decimal) -> float:
    """Exact for amounts under $10^7 at 8 decimals: a float's repr is the shortest round trip."""
    return float(value.normalize())
