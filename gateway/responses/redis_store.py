"""Stored responses in Redis, shared by every gateway process: one key per (tenant, id) with a
TTL, and per tenant an index of its ids by when they were stored, which bounds the tenant to
`max_entries` (its oldest go first). Only this module talks to Redis for responses; every key
names the tenant first. A Redis failure is `ResponseStoreUnavailable`, never Redis's own error."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.responses.errors import ResponseStoreUnavailable
from gateway.responses.store import StoredResponse

KEY_PREFIX = "lantern:resp:"
# KEYS[1]: the response, KEYS[2]: its tenant's index (one hash slot: both carry `{tenant}`).
# ARGV: the stored bytes, ttl_s, now_ms, max_entries, the id, the tenant's key prefix.
# Ids past their TTL leave the index first; the oldest past the bound are deleted with their
# keys (named from the prefix: same tenant, same slot).
PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[3]) - tonumber(ARGV[2]) * 1000)
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #oldest, 2 do
    redis.call('DEL', ARGV[6] .. oldest[i])
  end
end
redis.call('EXPIRE', KEYS[2], ARGV[2])
return over
"""


@asynccontextmanager
async def _typed() -> AsyncIterator[None]:
    try:
        yield
    except (RedisError, OSError) as exc:
        raise ResponseStoreUnavailable() from exc


class RedisResponseStore:
    def __init__(
        self,
        client: Redis,
        ttl_s: int,
        max_entries: int,
        key_prefix: str = KEY_PREFIX,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._prefix = key_prefix
        self._wall = wall_clock
        self._put = client.register_script(PUT)

    @classmethod
    def from_url(
        cls, url: str, ttl_s: int, max_entries: int, key_prefix: str = KEY_PREFIX
    ) -> RedisResponseStore:
        return cls(Redis.from_url(url, socket_timeout=5.0), ttl_s, max_entries, key_prefix)

    def _tenant_prefix(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}:"

    def _key(self, tenant: str, response_id: str) -> str:
        return self._tenant_prefix(tenant) + response_id

    def _index(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}"  # no id ends here: ids follow a colon

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None:
        keys = [self._key(tenant, response_id), self._index(tenant)]
        now_ms = int(self._wall() * 1000)
        args: list[bytes | str | int] = [stored.to_bytes(), self._ttl_s, now_ms]
        args += [self._max_entries, response_id, self._tenant_prefix(tenant)]
        async with _typed():
            await self._put(keys=keys, args=args)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        async with _typed():
            data = await self._client.get(self._key(tenant, response_id))
        if data is None:
            return None
        return StoredResponse.from_bytes(data if isinstance(data, bytes) else data.encode())

    async def delete(self, tenant: str, response_id: str) -> bool:
        async with _typed(), self._client.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(tenant, response_id))
            pipe.zrem(self._index(tenant), response_id)
            deleted, _ = await pipe.execute()
        return bool(deleted)

    async def aclose(self) -> None:
        await self._client.aclose()
