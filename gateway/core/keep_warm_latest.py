"""Which gateway process served each kept session's latest call, shared through Redis, so that
only that process sends the session's keep-warm reads.

Without it every process keeps the sessions it served, and one that no longer serves a session
would read the older prefix it holds (up to 3 times) beside the process that serves it now.
Each noted call gets a token; the loop publishes the tokens noted since its last turn ("newer
call wins", by wall time, in one script), and before a read asks whether its token is still the
session's latest. A token published less than a loop turn ago (5 s) can be missed; a read is due
minutes after its call. Redis unreachable: each process decides alone, as without Redis.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

KEY_PREFIX = "lantern:kw:"
TTL_S = 5 * 3600  # longer than a 1-hour entry kept by 3 reads
# SET the key to "<ms> <token>" unless it already names a call served later
NEWER_WINS = """
for i, key in ipairs(KEYS) do
  local ms, token = ARGV[2 * i - 1], ARGV[2 * i]
  local held = redis.call('GET', key)
  if not held or tonumber(string.match(held, '^%d+')) <= tonumber(ms) then
    redis.call('SET', key, ms .. ' ' .. token, 'EX', ARGV[#ARGV])
  end
end
return 0
"""

Session = tuple[str, str]  # (tenant, the autopilot's session root)


class LatestCalls(Protocol):
    def served(self, session: Session) -> str:
        """A call of `session` was served here: its token (published at the next `publish`)."""
        ...

    async def publish(self) -> None: ...

    async def latest(self, asked: Sequence[tuple[Session, str]]) -> list[bool]:
        """For each (session, token): whether no other process served a later call."""
        ...


class RedisLatestCalls:
    def __init__(
        self,
        client: Redis,
        key_prefix: str = KEY_PREFIX,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._prefix = key_prefix
        self._wall = wall_clock
        self._process = uuid.uuid4().hex[:12]
        self._count = 0
        self._pending: dict[Session, tuple[int, str]] = {}
        self._script = client.register_script(NEWER_WINS)

    @classmethod
    def from_url(cls, url: str, key_prefix: str = KEY_PREFIX) -> RedisLatestCalls:
        return cls(Redis.from_url(url, socket_timeout=1.0), key_prefix)

    def _key(self, session: Session) -> str:
        tenant, root = session
        return f"{self._prefix}{{{tenant}}}:{root}"

    def served(self, session: Session) -> str:
        self._count += 1
        token = f"{self._process}-{self._count}"
        self._pending[session] = (int(self._wall() * 1000), token)
        return token

    async def publish(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        keys = [self._key(s) for s in pending]
        args: list[str | int] = [v for ms, token in pending.values() for v in (ms, token)]
        try:
            await self._script(keys=keys, args=[*args, TTL_S])
        except (RedisError, OSError) as exc:
            log.warning("keep-warm: latest calls not shared (%s); each process decides alone", exc)

    async def latest(self, asked: Sequence[tuple[Session, str]]) -> list[bool]:
        if not asked:
            return []
        try:
            held = await self._client.mget([self._key(s) for s, _ in asked])
        except (RedisError, OSError) as exc:
            log.warning("keep-warm: latest calls unreadable (%s); each process decides alone", exc)
            return [True] * len(asked)
        return [
            value is None or _token(value) == token
            for (_, token), value in zip(asked, held, strict=True)
        ]

    async def aclose(self) -> None:
        await self._client.aclose()


def _token(value: bytes | str) -> str:
    text = value.decode() if isinstance(value, bytes) else value
    return text.partition(" ")[2]
