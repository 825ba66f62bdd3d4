"""Replica slots: a replica with a capacity (`max_in_flight`) serves at most that many calls of
this process at once; calls beyond it wait here, per tenant, served in weighted fair order
(`routing.fair_queue`), and a call that would wait past its tenant's bound is shed
(`QueueShed`: 429 + Retry-After) holding nothing. No routing decision and no HTTP here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.errors import GatewayError
from routing.fair_queue import FairQueue


class QueueShed(GatewayError):
    """The call would wait for a replica's slot longer than its tenant's `max_queue_ms`."""

    status_code = 429
    openai_type = "rate_limit_exceeded"
    anthropic_type = "rate_limit_error"

    def __init__(self, replica: str, retry_after_s: float, waited_s: float) -> None:
        super().__init__(
            f"replica {replica} is at capacity and the queue ahead would pass this tenant's "
            f"max_queue_ms; retry after {retry_after_s:.1f}s",
            rule="max_queue_ms",
        )
        self.replica = replica
        self.wait_s = retry_after_s  # the predicted wait; Retry-After rounds it up
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        self.waited_s = waited_s


class SlotPool(Protocol):
    """Slots per replica key: this process's own (`ReplicaSlots`), or shared by every process
    of a deployment through Redis (`shared_slots.SharedSlots`)."""

    def held(self, key: str) -> int: ...  # slots of `key` this process's calls hold

    def waiting(self, key: str) -> int: ...  # this process's calls queued for `key`

    def take(self, key: str, capacity: int) -> bool:
        """The fast path: a slot at once, with no waiting and no I/O; False: `wait` for one."""

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
        """A slot in fair order: the seconds queued, None when one was free without queueing;
        raises `QueueShed`."""

    def release(self, key: str) -> None:
        """Give a slot of `key` back (to the next waiter)."""


@dataclass(slots=True)
class _Slots:
    held: int = 0
    queue: FairQueue[asyncio.Future[None]] = field(default_factory=FairQueue)


class ReplicaSlots:
    """Slots per replica key. `take` is the fast path (a free slot and nobody waiting: no queue
    work at all); `wait` queues; `release` hands the slot to the next waiter or frees it."""

    def __init__(self, clock: Callable[[], float], max_per_tenant: int = 1000) -> None:
        self._clock = clock
        self._max_per_tenant = max_per_tenant
        self._slots: dict[str, _Slots] = {}

    def held(self, key: str) -> int:
        s = self._slots.get(key)
        return 0 if s is None else s.held

    def waiting(self, key: str) -> int:
        s = self._slots.get(key)
        return 0 if s is None else len(s.queue)

    def take(self, key: str, capacity: int) -> bool:
        s = self._slots.get(key)
        if s is None:
            s = self._slots[key] = _Slots(queue=FairQueue(self._max_per_tenant))
        if s.held < capacity and not s.queue:
            s.held += 1
            return True
        return False

    def release(self, key: str) -> None:
        s = self._slots.get(key)
        if s is None or s.held == 0:
            return
        while (nxt := s.queue.pop()) is not None:
            waiter = nxt[1]
            if not waiter.done():  # a waiter that left is taken out; this is only a guard
                waiter.set_result(None)  # the slot passes on: `held` is unchanged
                return
        s.held -= 1

    async def wait(
        self,
        key: str,
        capacity: int,
        tenant: str,
        *,
        weight: float,
        max_wait_s: float,
        service_s: float | None,
    ) -> float:
        """Wait for a slot in fair order; the seconds waited. Raises `QueueShed` when the
        predicted wait (the waiters ahead over the capacity, at the replica's service time) or
        the wait itself passes `max_wait_s`; a call that leaves (cancelled) holds nothing."""
        s = self._slots[key]
        began = self._clock()
        turn = Turn(s.queue, key, capacity, tenant, service_s or 0.0)
        turn.join(weight, max_wait_s)
        await turn.wait(max_wait_s, began, self._clock, self.release)
        return self._clock() - began


@dataclass(slots=True)
class Turn:
    """One call's place in a replica's fair queue, shared by the per-process and the Redis-shared
    slots: joining sheds a call whose predicted wait passes its bound, waiting sheds one whose
    wait does, and a caller that leaves holds nothing (a slot granted as it left is released)."""

    queue: FairQueue[asyncio.Future[None]]
    key: str
    capacity: int
    tenant: str
    per_call_s: float
    waiter: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def join(self, weight: float, max_wait_s: float) -> None:
        if not self.queue.push(self.tenant, self.waiter, weight):
            raise QueueShed(self.key, self._predicted(len(self.queue)), 0.0)
        predicted = self._predicted(self.queue.ahead(self.tenant, self.waiter))
        if predicted > max_wait_s:
            self.queue.remove(self.tenant, self.waiter)
            raise QueueShed(self.key, predicted, 0.0)

    async def wait(
        self,
        max_wait_s: float,
        began: float,
        clock: Callable[[], float],
        release: Callable[[str], None],
    ) -> None:
        waiter = self.waiter
        try:
            async with asyncio.timeout(max_wait_s):
                await waiter
        except TimeoutError:
            if not (waiter.done() and not waiter.cancelled()):
                self.queue.remove(self.tenant, waiter)
                raise QueueShed(
                    self.key, self._predicted(len(self.queue)), clock() - began
                ) from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                release(self.key)  # granted as the caller left: pass it on
            else:
                self.queue.remove(self.tenant, waiter)
            raise

    def _predicted(self, ahead: int) -> float:
        return predict_wait(self.capacity, self.per_call_s, ahead)


def predict_wait(capacity: int, service_s: float, ahead: int) -> float:
    """Seconds until a call with `ahead` waiters before it gets a slot."""
    return (ahead + 1) * service_s / max(capacity, 1)
