"""The in-process store under one tenant's many calls in flight: a reserve looks at the leases
that are due, not at every live one, so a tenant with thousands of streams open costs each of
its calls (and every other tenant waiting on the same event loop) no more than a quiet one."""

from __future__ import annotations

import asyncio
import sys
from types import FrameType
from typing import Any

from quotas.limits import Actual, Ask, Limits
from quotas.memory import MemoryQuotaStore
from tests.quotas.test_quota_limits import T0

LIMITS = Limits(lease_ms=30_000)


def opcodes_of_reserve(store: MemoryQuotaStore, tenant: str, rid: str, now_ms: int) -> int:
    """Bytecode instructions one reserve runs (the store finishes in one step): work, counted
    exactly, where a timing would be noise."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    reserving = store.reserve(tenant, LIMITS, Ask(1), reservation_id=rid, now_ms=now_ms)
    sys.settrace(trace)
    try:
        reserving.send(None)
    except StopIteration:
        pass
    finally:
        sys.settrace(None)
    return count


def test_a_reserve_does_not_walk_every_live_lease() -> None:
    store = MemoryQuotaStore()

    async def hold(tenant: str, n: int) -> None:
        for i in range(n):
            await store.reserve(tenant, LIMITS, Ask(1), reservation_id=f"{tenant}{i}", now_ms=T0)

    asyncio.run(hold("flood", 5_000))
    asyncio.run(hold("quiet", 5))
    flood = opcodes_of_reserve(store, "flood", "next", T0 + 1)
    quiet = opcodes_of_reserve(store, "quiet", "next", T0 + 1)
    assert flood < 2 * quiet


def test_settled_leases_are_dropped_and_due_ones_still_expire() -> None:
    store = MemoryQuotaStore()

    async def main() -> None:
        for i in range(10_000):  # each call settled before the next: one live lease at a time
            held = await store.reserve("acme", LIMITS, Ask(1), reservation_id=f"a{i}", now_ms=T0)
            await store.settle(held, Actual(1), now_ms=T0)
        book = store._books["acme"]
        assert len(book.leases) <= 2 * len(book.active) + 64
        await store.reserve("acme", LIMITS, Ask(1, 0.5), reservation_id="dies", now_ms=T0 + 1)
        alive = await store.usage("acme", LIMITS, now_ms=T0 + 30_000)
        assert (alive.concurrent, alive.held_micro_usd) == (1, 500_000)
        gone = await store.usage("acme", LIMITS, now_ms=T0 + 30_001)  # its lease ended
        assert (gone.concurrent, gone.held_micro_usd, gone.spend_micro_usd) == (0, 0, 500_000)

    asyncio.run(main())
