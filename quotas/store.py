"""The `QuotaStore` protocol: one semantics, implemented in process and in Redis.

The contract (both stores, identical decisions):
- Time is the caller's `now_ms`; each tenant keeps a high-water clock, so a caller whose clock
  lags is treated as if it were at the latest time seen (the window never moves backwards). A
  shared store bounds that clock by its own plus `quotas.lua.MAX_CLOCK_LEAD_MS`, so a caller
  whose clock runs ahead cannot move the tenant's window and leases into the future for others.
- Tokens and requests: a sliding-window log of reservations keyed by admission time. A call is
  admitted only if `used_in_window + asked <= limit`, so for any window the sum admitted within
  it is at most the limit (settling only lowers amounts unless an upstream reports more than
  was reserved; then the actual is counted and reported as overrun).
- Concurrency: live leases. A lease that expires (its process died) frees its slot; its tokens
  stay counted at the reserved amount and its dollars move from held to spent (conservative).
- Budget: per UTC month, `spent + held + asked <= budget`, in integer micro-dollars. A store
  built with `requires_seeded_spend` checks a budget only once `seed_spend` reached the tenant's
  month, and raises `SpendNotSeeded` (holding nothing) before then.
- Calls per session: a counter that expires `session_ttl_ms` after the session's last call;
  model calls and MCP tool calls of one session count on the same counter. A model call settled
  at nothing (`Actual.is_unused`: it never reached its upstream, or got nothing from it) is
  taken back off the count, unless the count has restarted since (the session had expired).
- Tool calls: their own sliding window and leases (`ToolCallLimits`), never a model call's.
- Settle is idempotent; a settle for a record no longer kept changes nothing.
"""

from __future__ import annotations

from typing import Protocol

from quotas.limits import (
    Actual,
    Ask,
    Limits,
    Reservation,
    Settlement,
    ToolCallLease,
    ToolCallLimits,
    UsageSnapshot,
)


class QuotaStore(Protocol):
    @property
    def name(self) -> str:
        """The store's kind; a `Reservation` names the store that holds it."""
        ...

    @property
    def settles_inline(self) -> bool:
        """True when `reserve` and `settle` never suspend (each runs to its end in one step, as
        the in-process store's do): a caller may then await them directly, since no
        cancellation can land inside them, instead of shielding them in a task of their own."""
        ...

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        """Check every limit and hold all or nothing; raise `QuotaExceeded`/`LimitNeverFits`."""
        ...

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        """Replace the held amounts by the actual ones and free the concurrency slot."""
        ...

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        """Raise the recorded spend of `period` to at least `spend_micro_usd` (never lowers it)."""
        ...

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        """Current use after expiring what is due at `now_ms`."""
        ...

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        """Count one tool call (and one call of `session_id`) or raise `QuotaExceeded`; its
        concurrency slot is held until `end_tool_call`."""
        ...

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        """Free the call's concurrency slot (idempotent)."""
        ...

    async def close(self) -> None: ...
