"""Keyed replies in Redis, shared by every gateway process and host: per record a hash (the
request's fingerprint, fence, lease, state) and a stream of its entries with ids 0-1, 0-2, ...,
so a retry on another process reads the reply as it is written (XREAD BLOCK). Every step is
one Lua script on Redis's own clock; Redis expires records itself after the retention.
Per tenant an index of its records by expiry bounds it to `max_records` and, with the sizes of
its records' entries, to `max_bytes`: the claim or append that goes past either deletes that
tenant's oldest, in the same script, so one tenant's replies never fill the Redis every tenant's
quotas live in. Every key names its tenant in a hash tag, so a tenant's records and index share a
slot. Only this module talks to Redis for replays."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.replay.errors import ReplayStoreUnavailable
from gateway.replay.records import (
    Claim,
    ClaimKind,
    Entry,
    EntryKind,
    Page,
    RecordState,
    split_scope,
)

KEY_PREFIX = "lantern:replay:"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MAX_BLOCK_S = 2.0  # a blocked read returns this often to look at the lease

_NOW = "local t = redis.call('time') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

# Every script's KEYS: the record's hash, its stream, its tenant's index (a sorted set of the
# tenant's record names, each scored by when its hash expires, in microseconds so that claims
# keep their order), the sizes of the tenant's records (name -> bytes of their entries) and
# their total. Claim and append take ARGV[3..7] alike: ttl_ms, max_records, the tenant's key
# prefix, the record's name, max_bytes; `index(size)` sets the record's expiry, its score and
# its size (nil: unchanged), drops names already expired, and while the tenant is past
# max_records or max_bytes deletes its soonest-expiring records but this one, with their keys
# (named from the prefix: same tenant, same slot).
_FORGET = """
local function forget(name)
  local size = tonumber(redis.call('hget', KEYS[4], name) or '0')
  redis.call('hdel', KEYS[4], name)
  return size
end
"""
_INDEXED = (
    _FORGET
    + """
local function size_of(name)
  return tonumber(redis.call('hget', KEYS[4], name) or '0')
end
local function index(size)
  local name = ARGV[6]
  local now_us = t[1] * 1000000 + t[2]
  local total = tonumber(redis.call('get', KEYS[5]) or '0')
  redis.call('pexpire', KEYS[1], ARGV[3])
  redis.call('zadd', KEYS[3], now_us + ARGV[3] * 1000, name)
  if size then
    total = total + size - forget(name)
    redis.call('hset', KEYS[4], name, size)
  end
  for _, old in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now_us)) do
    total = total - forget(old)
  end
  redis.call('zremrangebyscore', KEYS[3], '-inf', now_us)
  local skip = 0
  while redis.call('zcard', KEYS[3]) > tonumber(ARGV[4]) or total > tonumber(ARGV[7]) do
    local old = redis.call('zrange', KEYS[3], skip, skip)[1]
    if not old then break end
    if old == name then
      skip = skip + 1
    else
      redis.call('del', ARGV[5] .. old .. ':m', ARGV[5] .. old .. ':e')
      redis.call('zrem', KEYS[3], old)
      total = total - forget(old)
    end
  end
  local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
  local until_ms = string.format('%.0f', math.ceil(last[2] / 1000))
  redis.call('pexpireat', KEYS[3], until_ms)
  redis.call('set', KEYS[5], total)
  redis.call('pexpireat', KEYS[5], until_ms)
  if redis.call('exists', KEYS[4]) == 1 then redis.call('pexpireat', KEYS[4], until_ms) end
end
"""
)

# ARGV[1]: the request's fingerprint, ARGV[2]: lease_ms
_CLAIM = (
    _NOW
    + _INDEXED
    + """
local m = redis.call('hmget', KEYS[1], 'fp', 'fence', 'lease', 'state')
if not m[1] then
  redis.call('del', KEYS[2])
  redis.call('hset', KEYS[1], 'fp', ARGV[1], 'fence', 1, 'lease', now + ARGV[2], 'state', 'running')
  index(0)
  return {'new', 1}
end
local fence = tonumber(m[2])
if m[1] ~= ARGV[1] then return {'mismatch', fence} end
if m[4] ~= 'running' then return {m[4], fence} end
if tonumber(m[3]) > now then return {'running', fence} end
fence = fence + 1
redis.call('del', KEYS[2])
redis.call('hset', KEYS[1], 'fence', fence, 'lease', now + ARGV[2])
index(0)
return {'new', fence}
"""
)

_OWNED = """
local m = redis.call('hmget', KEYS[1], 'fence', 'state')
if m[1] ~= ARGV[1] or m[2] ~= 'running' then return 0 end
"""

# ARGV[1]: the owner's fence, ARGV[2]: lease_ms, then the entries' (kind, data) from ARGV[8]
_APPEND = (
    _NOW
    + _INDEXED
    + _OWNED
    + """
local n = redis.call('xlen', KEYS[2])
local size = size_of(ARGV[6])
for i = 8, #ARGV, 2 do
  if ARGV[i] == 'end' and ARGV[i + 1] ~= 'done' then
    redis.call('del', KEYS[2])
    redis.call('hset', KEYS[1], 'state', 'too_large')
    index(0)
    return 1
  end
  if ARGV[i] == 'end' then redis.call('hset', KEYS[1], 'state', 'done') end
  n = n + 1
  size = size + string.len(ARGV[i + 1])
  redis.call('xadd', KEYS[2], '0-' .. n, 'k', ARGV[i], 'd', ARGV[i + 1])
end
redis.call('hset', KEYS[1], 'lease', now + ARGV[2])
index(size)
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
"""
)

_RENEW = _NOW + _OWNED + "redis.call('hset', KEYS[1], 'lease', now + ARGV[2]) return 1"

# ARGV[2]: the record's name
_RELEASE = (
    _FORGET
    + _OWNED
    + """
redis.call('del', KEYS[1], KEYS[2])
redis.call('zrem', KEYS[3], ARGV[2])
local size = forget(ARGV[2])
if size > 0 and redis.call('exists', KEYS[5]) == 1 then redis.call('decrby', KEYS[5], size) end
return 1
"""
)

_READ = (
    _NOW
    + """
local m = redis.call('hmget', KEYS[1], 'fence', 'lease', 'state')
if not m[1] then return {'', 0, 0, {}} end
local leased = 0
if tonumber(m[2]) > now then leased = 1 end
return {m[3], tonumber(m[1]), leased, redis.call('xrange', KEYS[2], '0-' .. (ARGV[1] + 1), '+')}
"""
)


@asynccontextmanager
async def _typed() -> AsyncIterator[None]:
    try:
        yield
    except RedisError as exc:
        raise ReplayStoreUnavailable() from exc


class RedisReplayStore:
    def __init__(
        self,
        client: Redis,
        max_records: int,
        key_prefix: str = KEY_PREFIX,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        """`max_records`, `max_bytes`: each tenant's records, and the bytes of their entries,
        at most, held across every process."""
        self._client = client
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._prefix = key_prefix

    @classmethod
    def from_url(
        cls,
        url: str,
        max_records: int,
        key_prefix: str = KEY_PREFIX,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> RedisReplayStore:
        client = Redis.from_url(url, socket_timeout=MAX_BLOCK_S + 5.0)
        return cls(client, max_records, key_prefix, max_bytes=max_bytes)

    def _tenant_prefix(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}:"

    def _keys(self, scope: str) -> tuple[str, str, str, str, str]:
        tenant, name = split_scope(scope)
        base = self._tenant_prefix(tenant) + name
        index = f"{self._prefix}{{{tenant}}}"  # record names follow a colon, these a dot
        return base + ":m", base + ":e", index, index + ".sizes", index + ".bytes"

    def _bound(self, scope: str, ttl_s: float) -> tuple[int, int, str, str, int]:
        """ARGV[3..7] of a claim or an append: what `index()` needs."""
        tenant, name = split_scope(scope)
        return _ms(ttl_s), self._max_records, self._tenant_prefix(tenant), name, self._max_bytes

    async def _eval(self, script: str, scope: str, *args: bytes | str | int) -> Any:
        async with _typed():
            return await self._client.eval(script, 5, *self._keys(scope), *args)  # type: ignore[misc]

    async def claim(self, scope: str, fingerprint: str, lease_s: float, ttl_s: float) -> Claim:
        bound = self._bound(scope, ttl_s)
        kind, fence = await self._eval(_CLAIM, scope, fingerprint, _ms(lease_s), *bound)
        return Claim(cast(ClaimKind, kind.decode()), int(fence))

    async def append(
        self, scope: str, fence: int, entries: Sequence[Entry], lease_s: float, ttl_s: float
    ) -> bool:
        pairs = [part for e in entries for part in (e.kind, e.data)]
        bound = self._bound(scope, ttl_s)
        done = await self._eval(_APPEND, scope, fence, _ms(lease_s), *bound, *pairs)
        return bool(done)

    async def renew(self, scope: str, fence: int, lease_s: float) -> bool:
        return bool(await self._eval(_RENEW, scope, fence, _ms(lease_s)))

    async def release(self, scope: str, fence: int) -> None:
        await self._eval(_RELEASE, scope, fence, split_scope(scope)[1])

    async def read(self, scope: str, after: int, block_s: float) -> Page:
        page = await self._page(scope, after)
        if page.entries or page.state != "running" or block_s <= 0:
            return page
        block_ms = _ms(min(block_s, MAX_BLOCK_S))
        async with _typed():
            await self._client.xread({self._keys(scope)[1]: f"0-{after}"}, count=1, block=block_ms)
        return await self._page(scope, after)

    async def _page(self, scope: str, after: int) -> Page:
        state, fence, leased, rows = await self._eval(_READ, scope, after)
        entries = tuple(_entry(fields) for _, fields in rows)
        found = cast(RecordState, state.decode()) if state else None
        return Page(entries, found, int(fence), bool(leased))

    async def aclose(self) -> None:
        await self._client.aclose()


def _entry(fields: list[bytes]) -> Entry:
    values = dict(zip(fields[::2], fields[1::2], strict=True))
    return Entry(cast(EntryKind, values[b"k"].decode()), values[b"d"])


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))
