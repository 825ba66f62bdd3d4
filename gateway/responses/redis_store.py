"""Stored responses in Redis, shared by every gateway process: one key per (tenant, id) with a
TTL, and per tenant an index of its ids by when they were stored, with their sizes, which bounds
the tenant to `max_entries` and `max_bytes` (its oldest go first: each response holds its whole
conversation, so the bytes are what one tenant's chains could otherwise take of the Redis every
tenant's quotas live in), and the ids it deleted within the TTL (at most `max_entries`), which
a later put of the same id may not bring back. Only this module talks to Redis for responses;
every key names the tenant first. A Redis failure is `ResponseStoreUnavailable`, never
Redis's own error."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.responses.errors import ResponseStoreUnavailable
from gateway.responses.store import PutOutcome, StoredResponse, legacy_reply_json, reply_json

KEY_PREFIX = "lantern:resp:"
REPLY_HEAD_BYTES = 64 * 1024  # what a `GET` reads first: a reply, without its conversation
# KEYS: the response, its tenant's index (id -> when stored), sizes (id -> bytes), total
# bytes and deleted ids (id -> when deleted); one hash slot, all carry `{tenant}`. ARGV: the
# stored bytes, ttl_s, now_ms, max_entries, the id, the tenant's key prefix, max_bytes.
# Refused, before anything is written (PUT_REFUSALS): an id deleted within the TTL, an id
# stored already, bytes over the bound. Ids past their TTL leave the index first; then the
# oldest go, with their keys (named from the prefix: same tenant, same slot), while the
# tenant is over either bound.
PUT = """
local cutoff = tonumber(ARGV[3]) - tonumber(ARGV[2]) * 1000
local deleted_at = redis.call('ZSCORE', KEYS[5], ARGV[5])
if deleted_at and tonumber(deleted_at) > cutoff then return -1 end
if redis.call('EXISTS', KEYS[1]) == 1 then return -2 end
local size = string.len(ARGV[1])
if size > tonumber(ARGV[7]) then return -3 end
local function forget(id)
  local size = tonumber(redis.call('HGET', KEYS[3], id) or '0')
  redis.call('HDEL', KEYS[3], id)
  return size
end
local total = redis.call('INCRBY', KEYS[4], size - forget(ARGV[5]))
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[5], size)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff)) do
  total = total - forget(id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', cutoff)
local num_evicted = 0
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) or
    (total > tonumber(ARGV[7]) and redis.call('ZCARD', KEYS[2]) > 0) do
  local oldest = redis.call('ZPOPMIN', KEYS[2])[1]
  redis.call('DEL', ARGV[6] .. oldest)
  total = total - forget(oldest)
  num_evicted = num_evicted + 1
end
redis.call('SET', KEYS[4], total, 'EX', ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
return num_evicted
"""
PUT_REFUSALS = {-1: PutOutcome.DELETED, -2: PutOutcome.TAKEN, -3: PutOutcome.TOO_LARGE}
# KEYS: as PUT's. ARGV: the id, now_ms, ttl_s, max_entries. 1 when it was stored. The id is
# kept among the deleted for the TTL (a put still on its way is refused), at most
# `max_entries` of them per tenant (its oldest go).
DELETE = """
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]) * 1000)
local extra = redis.call('ZCARD', KEYS[5]) - tonumber(ARGV[4])
if extra > 0 then redis.call('ZPOPMIN', KEYS[5], extra) end
redis.call('EXPIRE', KEYS[5], ARGV[3])
local deleted = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
local size = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
redis.call('HDEL', KEYS[3], ARGV[1])
if size > 0 and redis.call('EXISTS', KEYS[4]) == 1 and
    redis.call('DECRBY', KEYS[4], size) <= 0 then
  redis.call('DEL', KEYS[4])
end
return deleted
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
        max_bytes: int = 1024 * 1024 * 1024,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._prefix = key_prefix
        self._wall = wall_clock
        self._put = client.register_script(PUT)
        self._delete = client.register_script(DELETE)

    @classmethod
    def from_url(
        cls,
        url: str,
        ttl_s: int,
        max_entries: int,
        key_prefix: str = KEY_PREFIX,
        max_bytes: int = 1024 * 1024 * 1024,
    ) -> RedisResponseStore:
        client = Redis.from_url(url, socket_timeout=5.0)
        return cls(client, ttl_s, max_entries, key_prefix, max_bytes=max_bytes)

    def _tenant_prefix(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}:"

    def _key(self, tenant: str, response_id: str) -> str:
        return self._tenant_prefix(tenant) + response_id

    def _index(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}"  # no id ends here: ids follow a colon

    def _keys(self, tenant: str, response_id: str) -> list[str]:
        """The response, the tenant's index, its sizes, its total bytes and deleted ids."""
        index = self._index(tenant)
        key = self._key(tenant, response_id)
        return [key, index, index + ".sizes", index + ".bytes", index + ".deleted"]

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        now_ms = int(self._wall() * 1000)
        args: list[bytes | str | int] = [data, self._ttl_s, now_ms]
        args += [self._max_entries, response_id, self._tenant_prefix(tenant), self._max_bytes]
        async with _typed():
            num_evicted = await self._put(keys=self._keys(tenant, response_id), args=args)
        return PUT_REFUSALS.get(int(num_evicted), PutOutcome.STORED)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        data = await self.get_bytes(tenant, response_id)
        return None if data is None else StoredResponse.from_bytes(data)

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        async with _typed():
            data = await self._client.get(self._key(tenant, response_id))
        if data is None:
            return None
        return data if isinstance(data, bytes) else data.encode()

    async def get_reply(self, tenant: str, response_id: str) -> bytes | None:
        """The reply from the first `REPLY_HEAD_BYTES` of the stored bytes; all of them only
        for a longer reply (its conversation still unread) or one stored as one object."""
        async with _typed():
            head = await self._client.getrange(
                self._key(tenant, response_id), 0, REPLY_HEAD_BYTES - 1
            )
        if not head:
            return None
        reply = reply_json(head if isinstance(head, bytes) else head.encode())
        if reply is not None:
            return reply
        data = await self.get_bytes(tenant, response_id)
        if data is None:
            return None
        reply = reply_json(data)
        return legacy_reply_json(data) if reply is None else reply

    async def delete(self, tenant: str, response_id: str) -> bool:
        now_ms = int(self._wall() * 1000)
        args: list[str | int] = [response_id, now_ms, self._ttl_s, self._max_entries]
        async with _typed():
            deleted = await self._delete(keys=self._keys(tenant, response_id), args=args)
        return bool(deleted)

    async def aclose(self) -> None:
        await self._client.aclose()
