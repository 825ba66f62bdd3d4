"""Slots shared between tenants: at most `per_tenant` holders per tenant and, when given,
`num_slots` in all, a freed slot handed to the waiting tenants in turn (not in arrival order),
so a tenant's flood waits behind its own work only; and worker threads shared that way. Owns
who goes next, never what the work does."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar, TypeVarTuple

import anyio

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@dataclass(slots=True, eq=False)
class _Waiter:
    woken: anyio.Event = field(default_factory=anyio.Event)
    is_granted: bool = False  # the slot is already this waiter's: whatever happens, release it


@dataclass(slots=True)
class _Lane:
    waiters: deque[_Waiter] = field(default_factory=deque)  # in arrival order
    num_holding: int = 0


class TenantGate:
    """At most `per_tenant` holders per tenant and `num_slots` (None: no bound) in all. A slot
    freed goes to the next tenant in turn that has a waiter and is under its own bound; a
    tenant's waiters are served in their order. A tenant's entry lives only while it holds or
    waits, so the table holds one entry per tenant with a call in flight, none when idle."""

    def __init__(self, per_tenant: int, num_slots: int | None = None) -> None:
        self._per_tenant = per_tenant
        self._num_slots = num_slots
        self._num_holding = 0
        self._lanes: dict[str, _Lane] = {}
        # tenants with a waiter that may take a slot as soon as one is free, in turn order
        # (a dict as an ordered set). While a slot is free it is empty: `_hand_over` keeps that.
        self._turns: dict[str, None] = {}

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        await self._acquire(tenant)
        try:
            yield
        finally:
            self._release(tenant)

    def __len__(self) -> int:
        """Tenants holding or waiting for a slot."""
        return len(self._lanes)

    async def _acquire(self, tenant: str) -> None:
        lane = self._lanes.get(tenant)
        if lane is None:
            lane = self._lanes[tenant] = _Lane()
        if not lane.waiters and lane.num_holding < self._per_tenant and self._has_free_slot():
            self._hold(lane)
            return
        waiter = _Waiter()
        lane.waiters.append(waiter)
        if lane.num_holding < self._per_tenant:
            self._turns.setdefault(tenant)
        try:
            await waiter.woken.wait()
        except BaseException:  # cancelled (the client went away) or the task group failed
            if waiter.is_granted:
                self._release(tenant)
            else:
                lane.waiters.remove(waiter)
                if not lane.waiters:
                    self._turns.pop(tenant, None)
                self._forget_if_idle(tenant, lane)
            raise

    def _release(self, tenant: str) -> None:
        lane = self._lanes[tenant]
        lane.num_holding -= 1
        self._num_holding -= 1
        if lane.waiters:  # under its bound again: its next turn comes after those waiting now
            self._turns.setdefault(tenant)
        self._hand_over()
        self._forget_if_idle(tenant, lane)

    def _hand_over(self) -> None:
        while self._turns and self._has_free_slot():
            tenant = next(iter(self._turns))
            del self._turns[tenant]
            lane = self._lanes[tenant]
            waiter = lane.waiters.popleft()
            self._hold(lane)
            waiter.is_granted = True
            waiter.woken.set()
            if lane.waiters and lane.num_holding < self._per_tenant:
                self._turns[tenant] = None  # at the back: every other waiting tenant first

    def _hold(self, lane: _Lane) -> None:
        lane.num_holding += 1
        self._num_holding += 1

    def _has_free_slot(self) -> bool:
        return self._num_slots is None or self._num_holding < self._num_slots

    def _forget_if_idle(self, tenant: str, lane: _Lane) -> None:
        if lane.num_holding == 0 and not lane.waiters:
            del self._lanes[tenant]


class TenantThreads:
    """Worker threads of their own (never the default pool's, which the rest of the process
    shares), `per_tenant` of a tenant's jobs at a time and `num_threads` in all, a freed one
    going to the waiting tenants in turn."""

    def __init__(self, per_tenant: int, num_threads: int) -> None:
        self.gate = TenantGate(per_tenant, num_threads)
        self._limiter = anyio.CapacityLimiter(num_threads)

    async def run(self, tenant: str, work: Callable[[*Ts], T], *args: *Ts) -> T:
        """`work(*args)` in a worker thread when `tenant`'s turn comes. A caller cancelled
        while waiting (the client went away) gives up its place; once started, the work runs
        to its end (a thread cannot be stopped) and only then frees its thread."""
        async with self.gate.slot(tenant):
            return await anyio.to_thread.run_sync(work, *args, limiter=self._limiter)
