"""The data of admission: limits, what a call asks for, reservations, settlements, usage.

Pure values and the pure rules both stores share (period of a budget, money units); the
never-fits rule sits beside the error it raises, in `quotas.errors`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

StoreDownMode = Literal["fail_open", "fail_closed"]
LimitName = Literal[
    "tokens_per_minute",
    "requests_per_minute",
    "concurrent_requests",
    "calls_per_session",
    "monthly_budget_usd",
    "tool_calls_per_minute",
    "concurrent_tool_calls",
]
SettleStatus = Literal["settled", "late", "duplicate", "unknown", "deferred"]
StoreName = Literal["memory", "redis"]

MICRO_PER_USD = 1_000_000
# A slot frees when some call ends, which no store can foresee: tell clients to come back soon.
CONCURRENCY_RETRY_MS = 1_000


@dataclass(frozen=True, slots=True)
class Limits:
    """One tenant's limits; `None` means unlimited. Times are in milliseconds of the caller's clock."""

    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None
    concurrent_requests: int | None = None
    calls_per_session: int | None = None
    monthly_budget_usd: float | None = None
    window_ms: int = 60_000
    lease_ms: int = 900_000
    session_ttl_ms: int = 86_400_000
    on_store_down_rates: StoreDownMode = "fail_open"
    on_store_down_budget: StoreDownMode = "fail_closed"

    def __post_init__(self) -> None:
        for name in ("tokens_per_minute", "requests_per_minute", "concurrent_requests"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.calls_per_session is not None and self.calls_per_session < 1:
            raise ValueError(f"calls_per_session must be >= 1, got {self.calls_per_session}")
        if self.monthly_budget_usd is not None and self.monthly_budget_usd < 0:
            raise ValueError(f"monthly_budget_usd must be >= 0, got {self.monthly_budget_usd}")
        if min(self.window_ms, self.lease_ms, self.session_ttl_ms) < 1:
            raise ValueError("window_ms, lease_ms and session_ttl_ms must be >= 1")

    @property
    def has_rate_limits(self) -> bool:
        return any(
            value is not None
            for value in (
                self.tokens_per_minute,
                self.requests_per_minute,
                self.concurrent_requests,
                self.calls_per_session,
            )
        )

    @property
    def budget_micro_usd(self) -> int | None:
        if self.monthly_budget_usd is None:
            return None
        return math.floor(self.monthly_budget_usd * MICRO_PER_USD + 1e-6)


@dataclass(frozen=True, slots=True)
class ToolCallLimits:
    """One tenant's limits on MCP tool calls; `None` means unlimited. `calls_per_session` is the
    counter model calls count on too (same store, same session)."""

    per_minute: int | None = None
    concurrent: int | None = None
    calls_per_session: int | None = None
    window_ms: int = 60_000
    lease_ms: int = 900_000
    session_ttl_ms: int = 86_400_000
    on_store_down: StoreDownMode = "fail_open"


@dataclass(frozen=True, slots=True)
class ToolCallLease:
    """An admitted tool call: its concurrency slot until `end_tool_call` (or the lease ends)."""

    id: str
    tenant: str
    store: StoreName


@dataclass(frozen=True, slots=True)
class Ask:
    """What one call reserves before dispatch: its worst case in counted tokens and dollars."""

    tokens: int
    cost_usd: float = 0.0
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.cost_usd < 0:
            raise ValueError("an ask cannot be negative")

    @property
    def cost_micro_usd(self) -> int:
        return usd_to_micro(self.cost_usd)


@dataclass(frozen=True, slots=True)
class Actual:
    """What a call really used, as reported by the upstream (or produced before it stopped)."""

    tokens: int
    cost_usd: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.cost_usd < 0:
            raise ValueError("actual usage cannot be negative")

    @property
    def cost_micro_usd(self) -> int:
        return usd_to_micro(self.cost_usd)

    @property
    def is_unused(self) -> bool:
        """Nothing to pay for: the call never reached its upstream (refused after admission,
        cancelled), or the upstream produced nothing billable."""
        return self.tokens == 0 and self.cost_micro_usd == 0


@dataclass(frozen=True, slots=True)
class WindowUse:
    """The per-minute window as the store saw it: used amounts, ms until it is empty again, and
    the limits it was checked against (for `x-ratelimit-*` headers)."""

    tokens_used: int
    requests_used: int
    reset_ms: int
    tokens_limit: int | None = None
    requests_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """A hold on capacity, released by settle or, if its process dies, by lease expiry.
    `session_id`: the session whose `calls_per_session` count this call is on (None: none)."""

    id: str
    tenant: str
    tokens: int
    cost_micro_usd: int
    period: str
    admitted_ms: int
    lease_expiry_ms: int
    store: StoreName
    window: WindowUse
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    """How a settle landed. `late`: the lease had expired (the hold was charged, now corrected);
    `duplicate`: already settled; `unknown`: the record is gone (charged at its worst case);
    `deferred`: the store is down, the settle is queued and replayed when it returns."""

    status: SettleStatus
    overrun_tokens: int
    period_spend_usd: float | None


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """A tenant's current use, for metrics, headers and tests."""

    now_ms: int
    tokens_used: int
    requests_used: int
    concurrent: int
    reset_ms: int
    period: str
    spend_micro_usd: int
    held_micro_usd: int
    session_calls: int = 0

    @property
    def spend_usd(self) -> float:
        return micro_to_usd(self.spend_micro_usd)


def usd_to_micro(usd: float) -> int:
    """Dollars to integer micro-dollars, rounded up (never under-charge); tolerant of float noise."""
    return math.ceil(usd * MICRO_PER_USD - 1e-6)


def micro_to_usd(micro: int) -> float:
    return micro / MICRO_PER_USD


def budget_period(now_ms: int) -> tuple[str, int]:
    """The UTC calendar month holding `now_ms` (`"2026-11"`) and the ms when it ends."""
    name, _, end_ms = budget_period_span(now_ms)
    return name, end_ms


def budget_period_span(now_ms: int) -> tuple[str, int, int]:
    """`budget_period` with the ms the month starts: (name, start, end), start <= now < end."""
    moment = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    end = datetime(year, month, 1, tzinfo=UTC)
    name = f"{moment.year:04d}-{moment.month:02d}"
    return name, int(start.timestamp() * 1000), int(end.timestamp() * 1000)
