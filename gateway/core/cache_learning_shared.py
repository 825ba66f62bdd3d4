"""The places the cache autopilot learnt, shared by the gateway processes through Redis: each
tenant's places in one sorted set of its own (by when learnt, at most `max_places`, expiring
`ttl_s` after the latest one), read into each process's table (gateway/core/cache_learning.py).

A process reads a tenant's places before serving its first call of the tenant, then again in
the background once they are `refresh_s` old: no Redis round trip on the other calls. A place
learnt here is written at once, off the request path. Redis unreachable or slow: each process
learns alone, as without Redis; a call never fails for it. Stored: the learnt patterns (a
value's class between up to 24 characters of the prompt on each side), never whole prompts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.core.cache_learning import MAX_PLACES, MAX_TENANTS, LearnedPlaces

log = logging.getLogger(__name__)

KEY_PREFIX = "lantern:learn:"
TTL_S = 7 * 24 * 3600  # a tenant's places outlive a week without a new one only if re-learnt
REFRESH_S = 2.0  # how stale a process's copy of a tenant's places may get
READ_TIMEOUT_S = 0.25  # a first call waits at most this for the shared places
RETRY_S = 5.0  # after a failure, the shared store is left alone this long


class SharedPlaces:
    """Keeps `places` (the process's table) in step with Redis, per tenant."""

    def __init__(
        self,
        client: Redis,
        places: LearnedPlaces,
        *,
        key_prefix: str = KEY_PREFIX,
        max_places: int = MAX_PLACES,
        ttl_s: float = TTL_S,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._places = places
        self._prefix = key_prefix
        self._max_places = max_places
        self._ttl_ms = int(ttl_s * 1000)
        self._refresh_s = refresh_s
        self._clock = clock
        self._read_at: OrderedDict[str, float] = OrderedDict()  # tenant -> when last read
        self._down_until = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        places.observer = self.learnt

    @classmethod
    def from_url(cls, url: str, places: LearnedPlaces, **kw: object) -> SharedPlaces:
        return cls(Redis.from_url(url, socket_timeout=1.0), places, **kw)  # type: ignore[arg-type]

    def key(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}"

    def ready(self, tenant: str) -> Awaitable[None] | None:
        """What a call of `tenant` awaits before its prompt is prepared: the first read of the
        tenant's places in this process; None when they are at hand (a stale copy is read
        again in the background meanwhile)."""
        read_at = self._read_at.get(tenant)
        now = self._clock()
        if read_at is not None and now - read_at < self._refresh_s:
            return None
        if now < self._down_until:
            return None
        self._mark_read(tenant, now)
        if read_at is None:
            return self._read_bounded(tenant)
        self._spawn(self._read(tenant))
        return None

    def learnt(self, tenant: str, pattern: str) -> None:
        """`LearnedPlaces.observer`: a place learnt in this process, written off the path."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no running loop (a prompt port used outside the gateway)
            return
        self._spawn(self._write(tenant, pattern))

    async def _read_bounded(self, tenant: str) -> None:
        with anyio.move_on_after(READ_TIMEOUT_S):
            await self._read(tenant)

    async def _read(self, tenant: str) -> None:
        try:
            found = await self._client.zrange(self.key(tenant), 0, -1)
        except (RedisError, OSError) as exc:
            self._failed("read", exc)
            return
        patterns = tuple(p.decode() if isinstance(p, bytes) else str(p) for p in found)
        self._places.merge(tenant, patterns)

    async def _write(self, tenant: str, pattern: str) -> None:
        key = self.key(tenant)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {pattern: time.time()})
                pipe.zremrangebyrank(key, 0, -(self._max_places + 1))
                pipe.pexpire(key, self._ttl_ms)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._failed("write", exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._down_until = self._clock() + RETRY_S
        log.warning("learnt cache places: shared %s failed (%s); learning alone", what, exc)

    def _mark_read(self, tenant: str, now: float) -> None:
        self._read_at[tenant] = now
        self._read_at.move_to_end(tenant)
        while len(self._read_at) > MAX_TENANTS:
            self._read_at.popitem(last=False)

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self._client.aclose()
