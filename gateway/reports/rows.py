"""Cost report data from the usage ledger: rows per group and their totals (`CostReport`), the
query that builds them and its parameters (period, group-by). Renders nothing (format.py, focus.py)
and knows no CLI (cost.py). Sync database I/O: async callers use a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.queries import GROUP_KEYS, LedgerQueries, UsageTotals

REPORT_FORMATS = ("table", "csv", "json")
COST_FORMATS = (*REPORT_FORMATS, "focus")  # focus: FinOps FOCUS 1.0 CSV, one row per day+key
DEFAULT_GROUP_BY = ("tenant",)
LAST_END = datetime(9999, 12, 31, tzinfo=UTC)  # the latest `until`: whole days still fit after it
# what one admin reply or console page sends at most: a report's rows, a spend series' amounts
MAX_VIEW_ROWS = 10_000


class InvalidReportQuery(ValueError):
    """A report parameter is wrong (unknown group key, bad date, empty window): HTTP 400.
    `field`: the parameter at fault (`group_by`, `since`, ...), the error's `param`."""

    rule = "bad_query"  # the error's `code`

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class ReportTooLarge(InvalidReportQuery):
    """More than MAX_VIEW_ROWS to send: a shorter period does, or the CLI's export."""

    rule = "report_too_large"


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
    cache_write_1h_tokens: int = 0  # of cache_write_tokens, those written at the 1 h TTL
    reasoning_tokens: int = 0  # of output_tokens, those spent reasoning (where reported apart)

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


def check_view_size(num_rows: int, unit: str = "rows") -> None:
    """ReportTooLarge, naming `since`, when a view would send more than MAX_VIEW_ROWS."""
    if num_rows > MAX_VIEW_ROWS:
        raise ReportTooLarge(
            f"since: this period holds {num_rows:,} {unit}, more than the {MAX_VIEW_ROWS:,} one "
            "reply sends: ask for a shorter period (since, until), or export it with "
            "`lantern report cost --format csv`",
            "since",
        )


def parse_group_by(values: Sequence[str] | None) -> tuple[str, ...]:
    """Keys from repeated and/or comma-separated values, in order, without repeats."""
    keys: list[str] = []
    for value in values or ():
        for key in (part.strip() for part in value.split(",")):
            if key not in GROUP_KEYS:
                raise InvalidReportQuery(
                    f"group_by: unknown group-by key {key[:40]!r}; use {'|'.join(GROUP_KEYS)}",
                    "group_by",
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
    else:
        end = _parse_instant(until, "until")
        whole_day = timedelta(days=1) if _is_date_only(until) else timedelta(0)
        if end > LAST_END - whole_day:  # later, the days after it would not fit in a datetime
            raise InvalidReportQuery(
                f"until: {until!r}: a report ends by {LAST_END.isoformat()}", "until"
            )
        end += whole_day
    if start >= end:
        raise InvalidReportQuery(
            f"since ({start.isoformat()}) must be before until ({end.isoformat()})", "since"
        )
    return start, end


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
        t.cache_write_1h_tokens,
        t.reasoning_tokens,
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
        cache_write_1h_tokens=sum(r.cache_write_1h_tokens for r in rows),
        reasoning_tokens=sum(r.reasoning_tokens for r in rows),
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
        raise InvalidReportQuery(
            f"{name}: {text!r} is not an ISO date or datetime", name
        ) from error
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError as error:  # an offset that moves it past year 1 or 9999
        raise InvalidReportQuery(
            f"{name}: {text!r} is outside the years 1 to 9999", name
        ) from error
