"""A shared store with a per-process fallback for when it is down, as each tenant's policy says.

Owns the fail-open/fail-closed decision and the replay of settles that could not reach the shared
store. Reservations stay in the store that admitted them, so nothing is counted twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from quotas.errors import QuotaStoreUnavailable, ReservationConflict
from quotas.limits import (
    Actual,
    Ask,
    Limits,
    Reservation,
    Settlement,
    ToolCallLease,
    ToolCallLimits,
    UsageSnapshot,
    WindowUse,
    budget_period,
)
from quotas.store import QuotaStore


@dataclass(frozen=True, slots=True)
class _PendingSettle:
    reservation: Reservation
    actual: Actual
    now_ms: int

    @property
    def tenant(self) -> str:
        return self.reservation.tenant


@dataclass(frozen=True, slots=True)
class _PendingEnd:
    """A tool call's slot owed back to the primary."""

    lease: ToolCallLease

    @property
    def tenant(self) -> str:
        return self.lease.tenant


class FailoverQuotaStore:
    """`primary` (Redis) while it answers; `fallback` (memory) for tenants whose policy fails open.

    After a failure the primary is skipped for `probe_interval_ms` (of the callers' clock), so an
    outage costs one timeout per interval, not one per call. `on_change(is_down, reason)` is
    called when the primary goes down or comes back. Deferred settles are kept per tenant, at
    most `max_pending_settles` each (a tenant's oldest goes first, to its lease), so one tenant's
    traffic never pushes another's out to be charged at its worst case; replays take the
    tenants in turn.
    """

    def __init__(
        self,
        primary: QuotaStore,
        fallback: QuotaStore,
        *,
        probe_interval_ms: int = 1_000,
        max_pending_settles: int = 10_000,
        replay_batch: int = 100,
        on_change: Callable[[bool, str], None] | None = None,
    ) -> None:
        if primary.name == fallback.name:
            raise ValueError("primary and fallback must be distinguishable by store name")
        self._primary = primary
        self._fallback = fallback
        self._probe_interval_ms = probe_interval_ms
        self._max_pending = max_pending_settles
        self._pending: dict[
            str, deque[_PendingSettle | _PendingEnd]
        ] = {}  # per tenant, oldest first
        self._replay_batch = replay_batch
        self._on_change = on_change
        self._down_since_ms: int | None = None
        self._last_try_ms = 0

    @property
    def name(self) -> str:
        return self._primary.name

    @property
    def settles_inline(self) -> bool:
        return False  # the primary's settle is a round trip (and a replay may run before it)

    @property
    def is_primary_down(self) -> bool:
        return self._down_since_ms is not None

    @property
    def num_pending_settles(self) -> int:
        return sum(len(queue) for queue in self._pending.values())

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        if self._pending and self._should_try_primary(now_ms):
            await self._replay(now_ms)  # what is owed may free what this call needs
        if self._should_try_primary(now_ms):
            try:
                reservation = await self._primary.reserve(
                    tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
                )
            except QuotaStoreUnavailable as exc:
                self._mark_down(now_ms, exc)
                self._defer(
                    _unconfirmed(self._primary.name, tenant, limits, ask, reservation_id, now_ms)
                )
            except ReservationConflict:  # a resend found the first send's hold: give it back
                self._defer(
                    _unconfirmed(self._primary.name, tenant, limits, ask, reservation_id, now_ms)
                )
            else:
                await self._mark_up(now_ms)
                return reservation
        if must_fail_closed(limits):
            raise QuotaStoreUnavailable("redis", "down; tenant policy fails closed")
        return await self._fallback.reserve(
            tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        if reservation.store == self._fallback.name:
            return await self._fallback.settle(reservation, actual, now_ms=now_ms)
        if self._should_try_primary(now_ms):
            try:
                settlement = await self._primary.settle(reservation, actual, now_ms=now_ms)
            except QuotaStoreUnavailable as exc:
                self._mark_down(now_ms, exc)
            else:
                await self._mark_up(now_ms)
                return settlement
        self._defer(_PendingSettle(reservation, actual, now_ms))
        return Settlement("deferred", max(0, actual.tokens - reservation.tokens), None)

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        """Seed both stores; raise `QuotaStoreUnavailable` if the primary could not be seeded."""
        await self._fallback.seed_spend(tenant, period, spend_micro_usd, now_ms=now_ms)
        await self._primary.seed_spend(tenant, period, spend_micro_usd, now_ms=now_ms)

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        if self._should_try_primary(now_ms):
            try:
                snapshot = await self._primary.usage(
                    tenant, limits, now_ms=now_ms, session_id=session_id
                )
            except QuotaStoreUnavailable as exc:
                self._mark_down(now_ms, exc)
            else:
                if self._down_since_ms is None and not self._pending:
                    return snapshot
                await self._mark_up(now_ms)  # replays deferred settles: look again after it
                return await self.usage(tenant, limits, now_ms=now_ms, session_id=session_id)
        return await self._fallback.usage(tenant, limits, now_ms=now_ms, session_id=session_id)

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        """The primary while it answers; else the fallback unless the tenant's rates fail
        closed (`on_store_down.rates`)."""
        if self._pending and self._should_try_primary(now_ms):
            await self._replay(now_ms)  # a slot owed back may be the one this call needs
        if self._should_try_primary(now_ms):
            try:
                lease = await self._primary.admit_tool_call(
                    tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
                )
            except QuotaStoreUnavailable as exc:
                self._mark_down(now_ms, exc)
                self._defer(_PendingEnd(ToolCallLease(call_id, tenant, "redis")))  # it may have run
            else:
                await self._mark_up(now_ms)
                return lease
        if limits.on_store_down == "fail_closed":
            raise QuotaStoreUnavailable("redis", "down; tenant policy fails closed")
        return await self._fallback.admit_tool_call(
            tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
        )

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        """In the store that admitted it; one owed to a primary that is down is given back when
        it answers again (the lease would hold the slot until it expires)."""
        if lease.store == self._fallback.name:
            await self._fallback.end_tool_call(lease, now_ms=now_ms)
            return
        if self._should_try_primary(now_ms):
            try:
                await self._primary.end_tool_call(lease, now_ms=now_ms)
            except QuotaStoreUnavailable as exc:
                self._mark_down(now_ms, exc)
            else:
                return
        self._defer(_PendingEnd(lease))

    async def close(self) -> None:
        await self._primary.close()
        await self._fallback.close()

    def _defer(self, pending: _PendingSettle | _PendingEnd) -> None:
        queue = self._pending.get(pending.tenant)
        if queue is None:
            queue = self._pending[pending.tenant] = deque(maxlen=self._max_pending)
        queue.append(pending)

    def _should_try_primary(self, now_ms: int) -> bool:
        if self._down_since_ms is None:
            return True
        return now_ms - self._last_try_ms >= self._probe_interval_ms

    def _mark_down(self, now_ms: int, exc: QuotaStoreUnavailable) -> None:
        self._last_try_ms = now_ms
        if self._down_since_ms is None:
            self._down_since_ms = now_ms
            if self._on_change is not None:
                self._on_change(True, exc.reason)

    async def _mark_up(self, now_ms: int) -> None:
        if self._down_since_ms is not None:
            self._down_since_ms = None
            if self._on_change is not None:
                self._on_change(False, "answering again")
        await self._replay(now_ms)

    async def _replay(self, now_ms: int) -> None:
        """Replay a batch of deferred settles, one tenant's oldest after another's; settle is
        idempotent, so a replay never double-counts."""
        for _ in range(self._replay_batch):
            if not self._pending:
                return
            tenant, queue = next(iter(self._pending.items()))
            pending = queue.popleft()
            del self._pending[tenant]  # back in at the end: the tenants take turns
            if queue:
                self._pending[tenant] = queue
            try:
                if isinstance(pending, _PendingEnd):
                    await self._primary.end_tool_call(pending.lease, now_ms=now_ms)
                else:
                    await self._primary.settle(pending.reservation, pending.actual, now_ms=now_ms)
            except QuotaStoreUnavailable as exc:
                self._pending.setdefault(tenant, queue).appendleft(pending)
                self._mark_down(now_ms, exc)
                return


def _unconfirmed(
    store: str, tenant: str, limits: Limits, ask: Ask, reservation_id: str, now_ms: int
) -> _PendingSettle:
    """A zero settle for a reserve the primary may have run without its answer reaching us (a
    timeout, a connection lost after the script ran): replayed like any deferred settle, it
    frees the hold and its slot, or finds nothing on record (`unknown`) and changes nothing."""
    period, _ = budget_period(now_ms)
    session = ask.session_id if limits.calls_per_session is not None else None
    held = Reservation(
        reservation_id,
        tenant,
        ask.tokens,
        ask.cost_micro_usd,
        period,
        now_ms,
        now_ms + limits.lease_ms,
        store,  # type: ignore[arg-type]
        WindowUse(0, 0, 0),
        session,  # a zero settle takes the call back off its session's count too
    )
    return _PendingSettle(held, Actual(0), now_ms)


def must_fail_closed(limits: Limits) -> bool:
    """Whether a tenant's limits forbid admitting on a per-process store while the shared one is down."""
    if limits.monthly_budget_usd is not None and limits.on_store_down_budget == "fail_closed":
        return True
    return limits.has_rate_limits and limits.on_store_down_rates == "fail_closed"
