"""Per-tenant caps on concurrent tool runs: a slot is taken before a run starts and given back
when it ends, whichever way it ends. In-process here; `inflight.RedisRunSlots` shares the count
among gateway processes. Decides nothing else.
"""

from __future__ import annotations

from typing import Protocol


class RunSlots(Protocol):
    async def acquire(self, tenant: str, token: str, limit: int, ttl_s: float) -> bool:
        """Take one of `limit` slots for `token`; False when all are taken. `ttl_s` bounds how
        long a slot outlives a process that died without releasing it."""
        ...

    async def release(self, tenant: str, token: str) -> None: ...


class LocalRunSlots:
    """One gateway process's runs per tenant (a dead process takes its slots with it)."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}

    async def acquire(self, tenant: str, token: str, limit: int, ttl_s: float) -> bool:
        held = self._held.setdefault(tenant, set())
        if len(held) >= limit:
            return False
        held.add(token)
        return True

    async def release(self, tenant: str, token: str) -> None:
        held = self._held.get(tenant)
        if held is not None:
            held.discard(token)
            if not held:
                del self._held[tenant]

    def held(self, tenant: str) -> int:
        return len(self._held.get(tenant, ()))
