"""Weighted fair order among tenants waiting for a replica's slot (start-time fair queuing).
Pure: which waiter goes next and how many go before a given one; the waiting itself (futures,
deadlines) is `gateway/fleet/admission_queue.py`'s.

Each tenant has a FIFO. A waiter's tag is `max(V, F_t)` where `V` is the tag last served and
`F_t` the tenant's previous finish (`tag + 1 / weight`); the least tag goes first (ties:
arrival). So a tenant with one call waiting is served after at most about one call of every
other active tenant (weighted), never behind another tenant's whole backlog. A tenant's entry
is dropped when its FIFO empties: the table holds only tenants that have waiters.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Lane(Generic[T]):
    finish: float = 0.0  # the tag after this tenant's last waiter
    tags: deque[tuple[float, int]] = field(default_factory=deque)  # (tag, arrival), ascending
    items: deque[T] = field(default_factory=deque)


class FairQueue(Generic[T]):
    """Waiters by tenant; `max_per_tenant` bounds each FIFO (a push beyond it is refused)."""

    def __init__(self, max_per_tenant: int = 1000) -> None:
        self._max_per_tenant = max_per_tenant
        self._lanes: dict[str, _Lane[T]] = {}
        self._vtime = 0.0
        self._arrivals = itertools.count()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    @property
    def num_tenants(self) -> int:
        return len(self._lanes)

    def push(self, tenant: str, item: T, weight: float = 1.0) -> bool:
        """Queue `item` for `tenant`; False when the tenant's FIFO is full (nothing queued)."""
        lane = self._lanes.get(tenant)
        if lane is None:
            lane = self._lanes[tenant] = _Lane()
        elif len(lane.items) >= self._max_per_tenant:
            return False
        tag = max(self._vtime, lane.finish)
        lane.finish = tag + 1.0 / max(weight, 1e-6)
        lane.tags.append((tag, next(self._arrivals)))
        lane.items.append(item)
        self._len += 1
        return True

    def pop(self) -> tuple[str, T] | None:
        """The next waiter in fair order, removed; None when nobody waits."""
        if not self._lanes:
            return None
        tenant = min(self._lanes, key=lambda t: self._lanes[t].tags[0])
        lane = self._lanes[tenant]
        tag, _ = lane.tags.popleft()
        item = lane.items.popleft()
        self._vtime = max(self._vtime, tag)
        self._len -= 1
        if not lane.items:
            del self._lanes[tenant]
        return tenant, item

    def remove(self, tenant: str, item: T) -> bool:
        """Take a waiter out (it gave up or timed out); False when it is not queued."""
        lane = self._lanes.get(tenant)
        if lane is None:
            return False
        for i, queued in enumerate(lane.items):
            if queued is item:
                del lane.items[i]
                del lane.tags[i]
                self._len -= 1
                if not lane.items:
                    del self._lanes[tenant]
                return True
        return False

    def ahead(self, tenant: str, item: T) -> int:
        """How many waiters go before `item` in fair order, as things stand (a later arrival of
        an idle tenant may still go first); -1 when it is not queued."""
        lane = self._lanes.get(tenant)
        if lane is None:
            return -1
        index = next((i for i, q in enumerate(lane.items) if q is item), None)
        if index is None:
            return -1
        key = lane.tags[index]
        total = 0
        for other in self._lanes.values():
            total += bisect.bisect_left(other.tags, key)
        return total
