"""A `QuotaStore` that records each reservation's hold and what its settle charged, over the
real memory store: the reference for "a hold is an upper bound of what the call costs"."""

from __future__ import annotations

from dataclasses import dataclass, field

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
from quotas.memory import MemoryQuotaStore


@dataclass
class Held:
    hold_micro_usd: int
    hold_tokens: int
    settled_micro_usd: int | None = None
    settled_tokens: int | None = None


@dataclass
class RecordingStore:
    inner: MemoryQuotaStore = field(default_factory=MemoryQuotaStore)
    held: dict[str, Held] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def settles_inline(self) -> bool:
        return self.inner.settles_inline

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        reservation = await self.inner.reserve(
            tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        self.held[reservation.id] = Held(reservation.cost_micro_usd, reservation.tokens)
        return reservation

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        held = self.held[reservation.id]
        held.settled_micro_usd, held.settled_tokens = actual.cost_micro_usd, actual.tokens
        return await self.inner.settle(reservation, actual, now_ms=now_ms)

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        await self.inner.seed_spend(tenant, period, spend_micro_usd, now_ms=now_ms)

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        return await self.inner.usage(tenant, limits, now_ms=now_ms, session_id=session_id)

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        return await self.inner.admit_tool_call(
            tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
        )

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        await self.inner.end_tool_call(lease, now_ms=now_ms)

    async def close(self) -> None:
        await self.inner.close()

    def settled(self) -> list[Held]:
        return [h for h in self.held.values() if h.settled_micro_usd is not None]
