"""Keyed replies in Redis, shared by every gateway process and host: per record a hash (the
request's fingerprint, fence, lease, state) and a stream of its entries with ids 0-1, 0-2, ...,
so a retry on another process reads the reply as it is written (XREAD BLOCK). Every step is
one Lua script on Redis's own clock; Redis expires records itself after the retention.
Only this module talks to Redis for replays."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.replay.errors import ReplayStoreUnavailable
from gateway.replay.records import Claim, ClaimKind, Entry, EntryKind, Page, RecordState

KEY_PREFIX = "lantern:replay:"
MAX_BLOCK_S = 2.0  # a blocked read returns this often to look at the lease

_NOW = "local t = redis.call('time') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

_CLAIM = (
    _NOW
    + """
local m = redis.call('hmget', KEYS[1], 'fp', 'fence', 'lease', 'state')
if not m[1] then
  redis.call('del', KEYS[2])
  redis.call('hset', KEYS[1], 'fp', ARGV[1], 'fence', 1, 'lease', now + ARGV[2], 'state', 'running')
  redis.call('pexpire', KEYS[1], ARGV[3])
  return {'new', 1}
end
local fence = tonumber(m[2])
if m[1] ~= ARGV[1] then return {'mismatch', fence} end
if m[4] ~= 'running' then return {m[4], fence} end
if tonumber(m[3]) > now then return {'running', fence} end
fence = fence + 1
redis.call('del', KEYS[2])
redis.call('hset', KEYS[1], 'fence', fence, 'lease', now + ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return {'new', fence}
"""
)

_OWNED = """
local m = redis.call('hmget', KEYS[1], 'fence', 'state')
if m[1] ~= ARGV[1] or m[2] ~= 'running' then return 0 end
"""

_APPEND = (
    _NOW
    + _OWNED
    + """
local n = redis.call('xlen', KEYS[2])
for i = 4, #ARGV, 2 do
  if ARGV[i] == 'end' and ARGV[i + 1] ~= 'done' then
    redis.call('del', KEYS[2])
    redis.call('hset', KEYS[1], 'state', 'too_large')
    redis.call('pexpire', KEYS[1], ARGV[3])
    return 1
  end
  if ARGV[i] == 'end' then redis.call('hset', KEYS[1], 'state', 'done') end
  n = n + 1
  redis.call('xadd', KEYS[2], '0-' .. n, 'k', ARGV[i], 'd', ARGV[i + 1])
end
redis.call('hset', KEYS[1], 'lease', now + ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
redis.call('pexpire', KEYS[2], ARGV[3])
return 1
"""
)

_RENEW = _NOW + _OWNED + "redis.call('hset', KEYS[1], 'lease', now + ARGV[2]) return 1"

_RELEASE = _OWNED + "redis.call('del', KEYS[1], KEYS[2]) return 1"

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
    def __init__(self, client: Redis, key_prefix: str = KEY_PREFIX) -> None:
        self._client = client
        self._prefix = key_prefix

    @classmethod
    def from_url(cls, url: str, key_prefix: str = KEY_PREFIX) -> RedisReplayStore:
        return cls(Redis.from_url(url, socket_timeout=MAX_BLOCK_S + 5.0), key_prefix)

    def _keys(self, scope: str) -> tuple[str, str]:
        base = f"{self._prefix}{{{scope}}}"  # one hash slot per record
        return base + ":m", base + ":e"

    async def _eval(self, script: str, scope: str, *args: bytes | str | int) -> Any:
        async with _typed():
            return await self._client.eval(script, 2, *self._keys(scope), *args)  # type: ignore[misc]

    async def claim(self, scope: str, fingerprint: str, lease_s: float, ttl_s: float) -> Claim:
        kind, fence = await self._eval(_CLAIM, scope, fingerprint, _ms(lease_s), _ms(ttl_s))
        return Claim(cast(ClaimKind, kind.decode()), int(fence))

    async def append(
        self, scope: str, fence: int, entries: Sequence[Entry], lease_s: float, ttl_s: float
    ) -> bool:
        pairs = [part for e in entries for part in (e.kind, e.data)]
        done = await self._eval(_APPEND, scope, fence, _ms(lease_s), _ms(ttl_s), *pairs)
        return bool(done)

    async def renew(self, scope: str, fence: int, lease_s: float) -> bool:
        return bool(await self._eval(_RENEW, scope, fence, _ms(lease_s)))

    async def release(self, scope: str, fence: int) -> None:
        await self._eval(_RELEASE, scope, fence)

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
