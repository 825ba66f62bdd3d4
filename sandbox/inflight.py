"""An optional in-flight gate in front of the SQL store (Redis SET NX PX with a token).

Advisory only: it spares the database a burst of duplicate claims; correctness stays with
the store's unique key and fences. redis is imported here and nowhere else in `sandbox/`.
"""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class InflightGate(Protocol):
    async def acquire(self, scope: str, token: str, ttl_s: float) -> bool: ...

    async def release(self, scope: str, token: str) -> None: ...


class RedisInflightGate:
    def __init__(self, client: aioredis.Redis, prefix: str = "lantern:toolrun:") -> None:
        self._client = client
        self._prefix = prefix

    async def acquire(self, scope: str, token: str, ttl_s: float) -> bool:
        done = await self._client.set(self._prefix + scope, token, nx=True, px=int(ttl_s * 1000))
        return bool(done)

    async def release(self, scope: str, token: str) -> None:
        await self._client.eval(_RELEASE, 1, self._prefix + scope, token)
