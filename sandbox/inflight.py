"""Redis helpers of the tool-run service: an optional in-flight gate in front of the SQL store
(SET NX PX with a token), and per-tenant run slots shared among gateway processes.

The gate is advisory: it spares the database a burst of duplicate claims; correctness stays
with the store's unique key and fences. redis is imported here and nowhere else in `sandbox/`.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from sandbox.errors import SandboxUnavailable

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class InflightGate(Protocol):
    async def acquire(self, scope: str, token: str, ttl_s: float) -> bool: ...

    async def release(self, scope: str, token: str) -> None: ...


class RedisInflightGate:
    """Redis not answering: the gate stands aside (acquire says yes, release does nothing) and
    the store decides alone; the run slots, on the same Redis, answer for it with a 503."""

    def __init__(self, client: aioredis.Redis, prefix: str = "lantern:toolrun:") -> None:
        self._client = client
        self._prefix = prefix

    async def acquire(self, scope: str, token: str, ttl_s: float) -> bool:
        key, ttl_ms = self._prefix + scope, int(ttl_s * 1000)
        try:
            return bool(await self._client.set(key, token, nx=True, px=ttl_ms))
        except RedisError:
            return True

    async def release(self, scope: str, token: str) -> None:
        with contextlib.suppress(RedisError):
            await self._client.eval(_RELEASE, 1, self._prefix + scope, token)


# KEYS[1]: the tenant's sorted set of slot tokens scored by expiry (ms, Redis's own clock).
_ACQUIRE_SLOT = """
local now = redis.call('time')
local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now_ms)
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('zadd', KEYS[1], now_ms + tonumber(ARGV[3]), ARGV[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], tonumber(ARGV[3]))
end
return 1
"""


class RedisRunSlots:
    """Per-tenant run slots shared by every gateway process on one Redis: a sorted set of
    tokens scored by expiry, so a slot whose gateway died frees itself after its run's
    longest possible life."""

    def __init__(self, client: aioredis.Redis, prefix: str = "lantern:toolslots:") -> None:
        self._client = client
        self._prefix = prefix

    async def acquire(self, tenant: str, token: str, limit: int, ttl_s: float) -> bool:
        """SandboxUnavailable when Redis does not answer: no run starts uncounted."""
        ttl_ms = max(1, int(ttl_s * 1000))
        try:
            taken = await self._client.eval(
                _ACQUIRE_SLOT, 1, self._prefix + tenant, token, limit, ttl_ms
            )
        except RedisError as exc:
            message = f"tool run slots: Redis unavailable ({type(exc).__name__})"
            raise SandboxUnavailable(message) from exc
        return bool(taken)

    async def release(self, tenant: str, token: str) -> None:
        """Best effort: a slot Redis did not hear about expires with its ttl."""
        with contextlib.suppress(RedisError):
            await self._client.zrem(self._prefix + tenant, token)
