"""The in-process quota store: the default, and the reference the Redis store is tested against.

Implements `quotas.store.QuotaStore` step for step like the Lua scripts in `quotas.lua`; it
must not read the clock (time comes in as `now_ms`) and holds no state beyond this process.
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Literal

from quotas.book import SESSION_SWEEP_MIN, Book, Record
from quotas.errors import QuotaExceeded, ReservationConflict, SpendNotSeeded, check_never_fits
from quotas.limits import (
    CONCURRENCY_RETRY_MS,
    Actual,
    Ask,
    LimitName,
    Limits,
    Reservation,
    Settlement,
    SettleStatus,
    ToolCallLease,
    ToolCallLimits,
    UsageSnapshot,
    WindowUse,
    budget_period_span,
    micro_to_usd,
)

# Sessions one tenant's counters keep at most (a fresh session id per call must not grow the
# process without bound): past it, the tenant's sessions that would expire soonest are forgotten.
MAX_SESSIONS_PER_TENANT = 100_000


class MemoryQuotaStore:
    """Quotas for one process. Every method runs without awaiting, so each is atomic."""

    name: Literal["memory"] = "memory"
    settles_inline: bool = True  # a subclass whose settle awaits must say False

    def __init__(
        self,
        *,
        max_sessions_per_tenant: int = MAX_SESSIONS_PER_TENANT,
        requires_seeded_spend: bool = False,
    ) -> None:
        """`requires_seeded_spend`: refuse to admit against a budget whose month no
        `seed_spend` reached (`SpendNotSeeded`), as the Redis store does for a lost budget."""
        self._books: dict[str, Book] = {}
        self._requires_seed = requires_seeded_spend
        self._max_sessions = max(max_sessions_per_tenant, 2 * SESSION_SWEEP_MIN)
        self._period = ("", 0, 0)  # the last `budget_period_span`: a month serves many calls

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        check_never_fits(limits, ask)
        book = self._book(tenant)
        now = self._advance(book, limits, now_ms)
        if reservation_id in book.records:
            raise ReservationConflict(reservation_id)
        period, period_end_ms = self._budget_period(now_ms)
        needs_seed = self._requires_seed and limits.budget_micro_usd is not None
        if needs_seed and f"seeded:{period}" not in book.budget:
            raise SpendNotSeeded(tenant, period)
        failure = self._first_failure(book, limits, ask, now, period, period_end_ms)
        if failure is not None:
            name, value, current, retry_ms = failure
            raise QuotaExceeded(name, value, current, retry_ms, self._window_use(book, limits, now))
        cost = ask.cost_micro_usd
        book.window[reservation_id] = (now, ask.tokens)
        book.tokens_used += ask.tokens
        book.active[reservation_id] = expiry_ms = now + limits.lease_ms
        heapq.heappush(book.leases, (expiry_ms, reservation_id))
        book.records[reservation_id] = Record(ask.tokens, cost, period)
        book.add_budget("held", period, cost)
        counted = ask.session_id if limits.calls_per_session is not None else None
        if counted is not None:
            book.count_session_call(counted, now, limits.session_ttl_ms)
        return Reservation(
            id=reservation_id,
            tenant=tenant,
            tokens=ask.tokens,
            cost_micro_usd=cost,
            period=period,
            admitted_ms=now,
            lease_expiry_ms=now + limits.lease_ms,
            store=self.name,
            window=self._window_use(book, limits, now),
            session_id=counted,
        )

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        book = self._books.get(reservation.tenant)
        record = book.records.get(reservation.id) if book is not None else None
        if book is None or record is None:
            spend = book.budget_of("spend", reservation.period) if book is not None else 0
            return Settlement("unknown", 0, micro_to_usd(spend))
        if record.state == "settled":
            spend = book.budget_of("spend", record.period)
            return Settlement("duplicate", 0, micro_to_usd(spend))
        if reservation.session_id is not None and actual.is_unused:
            book.uncount_session_call(reservation.session_id, reservation.admitted_ms)
        status: SettleStatus = "settled"
        if book.active.pop(reservation.id, None) is not None:
            book.num_stale += 1
            if book.num_stale > book.max_stale:
                book.drop_stale_leases()
            book.add_budget("held", record.period, -record.cost_micro_usd)
            book.add_budget("spend", record.period, actual.cost_micro_usd)
        else:
            status = "late"
            book.add_budget("spend", record.period, actual.cost_micro_usd - record.cost_micro_usd)
        entry = book.window.get(reservation.id)
        if entry is not None:
            book.tokens_used += actual.tokens - entry[1]
            book.window[reservation.id] = (entry[0], actual.tokens)
            record.state = "settled"
        else:
            del book.records[reservation.id]
        overrun = max(0, actual.tokens - record.tokens)
        return Settlement(status, overrun, micro_to_usd(book.budget_of("spend", record.period)))

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        book = self._book(tenant)
        key = f"spend:{period}"
        book.budget[key] = max(book.budget.get(key, 0), spend_micro_usd)
        book.budget[f"seeded:{period}"] = 1

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        book = self._book(tenant)
        now = self._advance(book, limits, now_ms)
        period, _ = self._budget_period(now_ms)
        window = self._window_use(book, limits, now)
        session_calls = book.session_calls(session_id, now) if session_id else 0
        return UsageSnapshot(
            now_ms=now,
            tokens_used=window.tokens_used,
            requests_used=window.requests_used,
            concurrent=len(book.active),
            reset_ms=window.reset_ms,
            period=period,
            spend_micro_usd=book.budget_of("spend", period),
            held_micro_usd=book.budget_of("held", period),
            session_calls=session_calls,
        )

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        book = self._book(tenant)
        now = book.clock_ms = max(now_ms, book.clock_ms)
        while book.tool_starts and book.tool_starts[0] <= now - limits.window_ms:
            book.tool_starts.popleft()
        book.tool_active = {i: end for i, end in book.tool_active.items() if end > now}
        book.sweep_sessions(now, self._max_sessions)
        session = session_id if limits.calls_per_session is not None else None
        calls = book.session_calls(session, now) if session else 0
        failure = self._first_tool_failure(book, limits, session, calls, now)
        if failure is not None:
            raise QuotaExceeded(*failure)
        book.tool_starts.append(now)
        book.tool_active[call_id] = now + limits.lease_ms
        if session:
            book.count_session_call(session, now, limits.session_ttl_ms)
        return ToolCallLease(call_id, tenant, self.name)

    @staticmethod
    def _first_tool_failure(
        book: Book, limits: ToolCallLimits, session: str | None, calls: int, now: int
    ) -> tuple[LimitName, float, float, int] | None:
        """The failing limit with the longest wait (ties: the order below), or None."""
        failures: list[tuple[LimitName, float, float, int]] = []
        cap, running = limits.concurrent, len(book.tool_active)
        if cap is not None and running + 1 > cap:
            failures.append(("concurrent_tool_calls", cap, running, CONCURRENCY_RETRY_MS))
        per_minute, started = limits.per_minute, len(book.tool_starts)
        if per_minute is not None and started + 1 > per_minute:
            leaving_ms = book.tool_starts[started - per_minute] + limits.window_ms - now
            failures.append(("tool_calls_per_minute", per_minute, started, leaving_ms))
        cps = limits.calls_per_session
        if session and cps is not None and calls + 1 > cps:
            failures.append(("calls_per_session", cps, calls, book.sessions[session][1] - now))
        return max(failures, key=lambda f: f[3]) if failures else None

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        book = self._books.get(lease.tenant)
        if book is not None:
            book.tool_active.pop(lease.id, None)

    async def close(self) -> None:
        self._books.clear()

    def _book(self, tenant: str) -> Book:
        """The tenant's book, made on its first call (not a new one per call to throw away)."""
        book = self._books.get(tenant)
        if book is None:
            book = self._books[tenant] = Book()
        return book

    def _budget_period(self, now_ms: int) -> tuple[str, int]:
        """`budget_period(now_ms)`, worked out again only when `now_ms` leaves the last month."""
        name, start_ms, end_ms = self._period
        if not start_ms <= now_ms < end_ms:
            name, start_ms, end_ms = self._period = budget_period_span(now_ms)
        return name, end_ms

    # --- the steps every operation shares (mirrored by the Lua prelude) -----------------------

    def _advance(self, book: Book, limits: Limits, now_ms: int) -> int:
        """Move the tenant's clock to `now_ms` (never back), drop old window entries, reap leases."""
        now = max(now_ms, book.clock_ms)
        book.clock_ms = now
        cutoff = now - limits.window_ms
        while book.window:
            reservation_id, (admitted_ms, tokens) = next(iter(book.window.items()))
            if admitted_ms > cutoff:
                break
            book.window.popitem(last=False)
            book.tokens_used -= tokens
            if reservation_id not in book.active:
                book.records.pop(reservation_id, None)
        if book.leases and book.leases[0][0] <= now:  # the soonest, not every live lease
            book.end_due_leases(now)
        book.sweep_sessions(now, self._max_sessions)
        return now

    def _first_failure(
        self, book: Book, limits: Limits, ask: Ask, now: int, period: str, period_end_ms: int
    ) -> tuple[LimitName, float, float, int] | None:
        """The failing limit with the longest wait (ties: the order below), or None."""
        failures: list[tuple[LimitName, float, float, int]] = []
        tpm = limits.tokens_per_minute
        if tpm is not None and book.tokens_used + ask.tokens > tpm:
            need = book.tokens_used + ask.tokens - tpm
            retry = self._wait_for_tokens(book, limits, now, need)
            failures.append(("tokens_per_minute", tpm, book.tokens_used, retry))
        rpm = limits.requests_per_minute
        if rpm is not None and len(book.window) + 1 > rpm:
            need = len(book.window) + 1 - rpm
            retry = self._wait_for_requests(book, limits, now, need)
            failures.append(("requests_per_minute", rpm, len(book.window), retry))
        conc = limits.concurrent_requests
        if conc is not None and len(book.active) + 1 > conc:
            failures.append(("concurrent_requests", conc, len(book.active), CONCURRENCY_RETRY_MS))
        cps = limits.calls_per_session
        if cps is not None and ask.session_id is not None:
            calls = book.session_calls(ask.session_id, now)
            if calls + 1 > cps:
                retry = book.sessions[ask.session_id][1] - now
                failures.append(("calls_per_session", cps, calls, retry))
        budget = limits.budget_micro_usd
        if budget is not None:
            current = book.budget_of("spend", period) + book.budget_of("held", period)
            if current + ask.cost_micro_usd > budget:
                retry = period_end_ms - now
                failures.append(
                    ("monthly_budget_usd", micro_to_usd(budget), micro_to_usd(current), retry)
                )
        best = None
        for failure in failures:
            if best is None or failure[3] > best[3]:
                best = failure
        return best

    @staticmethod
    def _wait_for_tokens(book: Book, limits: Limits, now: int, need: int) -> int:
        """Ms until the oldest window entries have left with at least `need` tokens."""
        freed = 0
        for admitted_ms, tokens in book.window.values():
            freed += tokens
            if freed >= need:
                return admitted_ms + limits.window_ms - now
        raise AssertionError("the window holds fewer tokens than it counts")

    @staticmethod
    def _wait_for_requests(book: Book, limits: Limits, now: int, need: int) -> int:
        """Ms until the `need` oldest window entries have left."""
        admitted_ms, _ = next(islice(book.window.values(), need - 1, None))
        return admitted_ms + limits.window_ms - now

    @staticmethod
    def _window_use(book: Book, limits: Limits, now: int) -> WindowUse:
        reset_ms = 0
        if book.window:
            newest = next(reversed(book.window.values()))[0]
            reset_ms = newest + limits.window_ms - now
        return WindowUse(
            book.tokens_used,
            len(book.window),
            reset_ms,
            limits.tokens_per_minute,
            limits.requests_per_minute,
        )
