"""The fan-out gate's leases in Redis, so that one write serves a fan-out spread over several
gateway processes: the first call for a (tenant, prefix key, upstream) takes a short lease, a
call of any process that finds it waits until the lease is given back (its holder's first byte,
or its failure) or runs out.

Knows keys and tokens only (never prompts). Redis unreachable: each process gates alone, as
without Redis (a call never fails for it), and Redis is left alone for `RETRY_S`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

KEY_PREFIX = "lantern:fanout:"
POLL_S = 0.01  # how often a waiter in another process looks at the lease
ASK_TIMEOUT_S = 0.25  # a call asks Redis at most this long before it goes on alone
RETRY_S = 5.0
# DEL the lease only if it is still the caller's (it may have run out and been taken anew)
GIVE_BACK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

FanoutKey = tuple[str, str, str]  # (tenant, prefix write key, upstream)


class SharedLeases:
    def __init__(
        self,
        client: Redis,
        lease_s: float,
        *,
        key_prefix: str = KEY_PREFIX,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._lease_ms = int(lease_s * 1000)
        self.key_prefix = key_prefix
        self._poll_s = poll_s
        self._clock = clock
        self._down_until = 0.0
        self._give_back = client.register_script(GIVE_BACK)

    @classmethod
    def from_url(cls, url: str, lease_s: float, key_prefix: str = KEY_PREFIX) -> SharedLeases:
        return cls(Redis.from_url(url, socket_timeout=1.0), lease_s, key_prefix=key_prefix)

    def key(self, key: FanoutKey) -> str:
        tenant, write_key, upstream = key
        digest = hashlib.sha256(f"{write_key}\0{upstream}".encode()).hexdigest()[:32]
        return f"{self.key_prefix}{{{tenant}}}:{digest}"

    async def take(self, key: FanoutKey, token: str) -> str | None:
        """Take the lease for `key`: None when taken (or Redis is down: lead alone), else the
        token of the call holding it."""
        if self._clock() < self._down_until:
            return None
        try:
            held = await self._client.set(
                self.key(key), token, nx=True, px=self._lease_ms, get=True
            )
        except (RedisError, OSError) as exc:
            self._failed("take", exc)
            return None
        return None if held is None else _text(held)  # type: ignore[arg-type]

    async def holder(self, key: FanoutKey) -> str | None:
        """The token of the call holding `key`'s lease, if any."""
        if self._clock() < self._down_until:
            return None
        with anyio.move_on_after(ASK_TIMEOUT_S):
            try:
                held = await self._client.get(self.key(key))
            except (RedisError, OSError) as exc:
                self._failed("read", exc)
                return None
            return None if held is None else _text(held)
        return None

    async def wait_released(self, key: FanoutKey, token: str) -> None:
        """Until the lease `token` held is given back or runs out (the caller bounds it)."""
        name = self.key(key)
        while True:
            await anyio.sleep(self._poll_s)
            try:
                held = await self._client.get(name)
            except (RedisError, OSError) as exc:
                self._failed("read", exc)
                return
            if held is None or _text(held) != token:
                return

    async def give_back(self, key: FanoutKey, token: str) -> None:
        if self._clock() < self._down_until:
            return  # it runs out
        try:
            await self._give_back(keys=[self.key(key)], args=[token])
        except (RedisError, OSError) as exc:
            self._failed("give back", exc)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._down_until = self._clock() + RETRY_S
        log.warning("fan-out lease: %s failed (%s); this process gates alone", what, exc)

    async def aclose(self) -> None:
        await self._client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
