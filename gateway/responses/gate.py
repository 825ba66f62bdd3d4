"""How many of one tenant's continuations may read and expand their stored conversations at
once. A body of a hundred bytes names a conversation of megabytes, read and parsed before any
quota is asked (the quotas need its tokens): unbounded, one tenant's flood of them would hold
the worker threads and the memory every tenant's calls need. Holds no conversation itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

READS_PER_TENANT = 4  # a tenant's parallel agents still read short conversations in parallel


@dataclass(slots=True)
class _Lane:
    slots: anyio.Semaphore
    num_users: int = 0  # holders and waiters


class TenantGate:
    """At most `per_tenant` holders per tenant; the rest of that tenant's wait (in order), no
    other tenant's. A tenant's entry lives only while it has holders or waiters, so the table
    holds at most one entry per tenant with a call in flight."""

    def __init__(self, per_tenant: int = READS_PER_TENANT) -> None:
        self._per_tenant = per_tenant
        self._lanes: dict[str, _Lane] = {}

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncIterator[None]:
        lane = self._lanes.get(tenant)
        if lane is None:
            lane = self._lanes[tenant] = _Lane(anyio.Semaphore(self._per_tenant))
        lane.num_users += 1
        try:
            async with lane.slots:
                yield
        finally:
            lane.num_users -= 1
            if lane.num_users == 0:
                del self._lanes[tenant]

    def __len__(self) -> int:
        return len(self._lanes)
