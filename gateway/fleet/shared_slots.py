"""Replica slots shared by the processes of one deployment (`redis_url`): a call holds a lease in
Redis (`slot_store`) as well as its place here, so N processes together never send a replica more
than its capacity. Each process keeps its own per-tenant fair queue; one pump per replica takes
shared slots for it, in that order, waking on a release anywhere (pub/sub) or polling. Across
processes a freed slot goes to whichever asks first.

Redis unreachable: each process enforces the capacity on its own calls (as without Redis), on
purpose and logged (`SharedLink`), until Redis answers again. No routing decision here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

from redis.asyncio import Redis

from gateway.fleet.admission_queue import Turn
from gateway.fleet.affinity_sync import STORE_ERRORS
from gateway.fleet.shared_link import SharedLink
from gateway.fleet.slot_store import RedisSlots
from routing.fair_queue import FairQueue

log = logging.getLogger("lantern.fleet.slots")


@dataclass(slots=True)
class _Line:
    """One replica as this process sees it: its waiters, the leases it holds, and the slots it
    took on its own count while Redis was down."""

    capacity: int
    queue: FairQueue[asyncio.Future[None]]
    leases: list[str] = field(default_factory=list)
    local: int = 0
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task[None] | None = None


class SharedSlots:
    """A `SlotPool` over Redis leases. `poll_s` bounds how long a waiting process misses a slot
    freed by a lease that expired (no message) or a release message it lost."""

    def __init__(
        self,
        store: RedisSlots,
        listener: Redis,
        link: SharedLink,
        clock: Callable[[], float],
        *,
        poll_s: float = 0.25,
        max_per_tenant: int = 1000,
    ) -> None:
        self.store, self._listener, self.link, self._clock = store, listener, link, clock
        self._poll_s, self._max_per_tenant = poll_s, max_per_tenant
        self._lines: dict[str, _Line] = {}
        self._origin = os.urandom(6).hex()
        self._ids = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()

    def held(self, key: str) -> int:
        line = self._lines.get(key)
        return 0 if line is None else len(line.leases) + line.local

    def waiting(self, key: str) -> int:
        line = self._lines.get(key)
        return 0 if line is None else len(line.queue)

    def take(self, key: str, capacity: int) -> bool:
        return False  # every slot is a round trip to Redis: `wait`

    async def wait(
        self,
        key: str,
        capacity: int,
        tenant: str,
        *,
        weight: float,
        max_wait_s: float,
        service_s: float | None,
    ) -> float | None:
        line = self._line(key, capacity)
        began = self._clock()
        if not line.queue and await self._acquire(key, line):
            return None
        turn = Turn(line.queue, key, capacity, tenant, service_s or 0.0)
        turn.join(weight, max_wait_s)
        if line.pump is None:
            line.pump = self._spawn(self._pump(key, line))
        await turn.wait(max_wait_s, began, self._clock, self.release)
        return self._clock() - began

    def release(self, key: str) -> None:
        line = self._lines.get(key)
        if line is None:
            return
        if line.local:
            line.local -= 1
            line.freed.set()
        elif line.leases:
            self._spawn(self._release(key, line.leases.pop()))

    def _line(self, key: str, capacity: int) -> _Line:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(capacity, FairQueue(self._max_per_tenant))
        line.capacity = capacity
        return line

    async def _acquire(self, key: str, line: _Line) -> bool:
        """One slot for this process: a lease in Redis; its own count while Redis is down."""
        if self.link.is_down and not self.link.should_try():
            self.link.skipped("slots")
            return self._take_local(line)
        lease = f"{self._origin}:{next(self._ids)}"
        try:
            taken = await self.store.acquire(key, line.capacity, lease)
        except STORE_ERRORS as exc:
            self.link.failed("slots", exc)
            return self._take_local(line)
        except asyncio.CancelledError:
            self._spawn(self._release(key, lease))  # the script may have run
            raise
        self.link.succeeded()
        if taken:
            line.leases.append(lease)
        return taken

    def _take_local(self, line: _Line) -> bool:
        if len(line.leases) + line.local < line.capacity:
            line.local += 1
            return True
        return False

    async def _pump(self, key: str, line: _Line) -> None:
        """Take slots for this process's waiters, in their fair order, while any wait."""
        try:
            while line.queue:
                line.freed.clear()
                if await self._acquire(key, line):
                    if not self._grant(line):
                        self.release(key)  # every waiter left meanwhile
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll_s):
                        await line.freed.wait()
        finally:
            line.pump = None

    @staticmethod
    def _grant(line: _Line) -> bool:
        while (nxt := line.queue.pop()) is not None:
            if not nxt[1].done():
                nxt[1].set_result(None)
                return True
        return False

    async def _release(self, key: str, lease: str) -> None:
        try:
            await self.store.release(key, lease)
        except STORE_ERRORS as exc:  # the lease expires on its own
            self.link.failed("slots_release", exc)

    def _spawn(self, coro: Coroutine[None, None, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- lifecycle: the release listener and the lease renewals -------------------------------

    async def run(self) -> None:
        """Listen for releases and renew this process's leases until cancelled."""
        renewing = asyncio.get_running_loop().create_task(self._renew_forever())
        try:
            while True:
                try:
                    await self._listen()
                except STORE_ERRORS as exc:
                    self.link.failed("slots_subscribe", exc)
                await asyncio.sleep(1.0)
        finally:
            renewing.cancel()

    async def _listen(self) -> None:
        async with self._listener.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self.store.channel)
            while True:
                msg = await pubsub.get_message(timeout=None)
                if msg is None or msg["type"] != "message":
                    continue
                data = msg["data"]
                line = self._lines.get(data.decode() if isinstance(data, bytes) else str(data))
                if line is not None:
                    line.freed.set()

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.store.lease_ms / 3000)
            for key, line in list(self._lines.items()):
                if line.leases:
                    await self._renew(key, list(line.leases))

    async def _renew(self, key: str, leases: list[str]) -> None:
        try:
            kept = await self.store.renew(key, leases)
        except STORE_ERRORS as exc:
            self.link.failed("slots_renew", exc)
            return
        if kept < len(leases):
            log.warning(
                "%d of %d slot leases on %s had expired", len(leases) - kept, len(leases), key
            )

    async def aclose(self) -> None:
        """Give every lease back (best effort: they expire anyway) and close the connections."""
        for key, line in self._lines.items():
            while line.leases:
                await self._release(key, line.leases.pop())
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.store.aclose()
        await self._listener.aclose()
