"""Session → venue affinity shared by every gateway process through Redis: one hash per session
with a TTL, and a version that fences moves. A move is a compare-and-set on the version the
mover read, so two processes cannot flip a session back and forth; staying put only refreshes.

Owns the Redis keys and the Lua script; what the fleet does with an entry is `affinity_sync`.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import BlockingConnectionPool, Redis

# KEYS[1] the session's hash. ARGV: expected version (0: none read), placement, cached tokens,
# wall-clock ms of the call, TTL ms. Returns {won, version, placement, cached tokens, wall ms}.
_COMMIT = """
local cur = redis.call('HMGET', KEYS[1], 'v', 'where', 'tok', 'at')
local v = tonumber(cur[1]) or 0
if cur[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'tok', ARGV[3], 'at', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1, v, ARGV[2], ARGV[3], ARGV[4]}
end
if v ~= 0 and v ~= tonumber(ARGV[1]) then
  return {0, v, cur[2], cur[3], cur[4]}
end
v = v + 1
redis.call('HSET', KEYS[1], 'v', v, 'where', ARGV[2], 'tok', ARGV[3], 'at', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {1, v, ARGV[2], ARGV[3], ARGV[4]}
"""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a session's cache lives: venue, backend and replica key (None for an API)."""

    venue: str
    backend: str
    replica: str | None

    def encode(self) -> str:
        return f"{self.venue}|{self.backend}|{self.replica or ''}"

    @staticmethod
    def decode(text: str) -> Placement:
        venue, backend, replica = text.split("|", 2)
        return Placement(venue, backend, replica or None)


@dataclass(frozen=True, slots=True)
class SharedEntry:
    """A session's shared record. `version` counts its moves (the fencing token)."""

    placement: Placement
    version: int
    cached_tokens: int
    seen_ms: int  # wall clock of its last call (processes do not share a monotonic clock)


@dataclass(frozen=True, slots=True)
class CommitResult:
    won: bool  # False: another process moved the session since our read; `entry` is theirs
    entry: SharedEntry


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class RedisAffinity:
    """The shared session table. Every key has a TTL of `ttl_s`; a commit renews it."""

    def __init__(self, redis: Redis, *, key_prefix: str, ttl_s: float) -> None:
        self.redis, self._prefix, self._ttl_ms = redis, key_prefix, int(ttl_s * 1000)
        self._commit = redis.register_script(_COMMIT)

    @classmethod
    def from_url(
        cls, url: str, *, key_prefix: str = "lantern:fleet:", ttl_s: float, timeout_s: float = 1.0
    ) -> RedisAffinity:
        """A lookup that does not answer within `timeout_s` is given up for the local view (the
        call goes on, the outage is logged). The recall runs beside the quota reservation, whose
        own Redis round trip the call waits for anyway, so a second is no added latency while
        Redis answers; a fraction of a second gives up on a live Redis whenever this process is
        starved of CPU for a moment, and the session loses its replica's cache."""
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=32,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
        return cls(Redis(connection_pool=pool), key_prefix=key_prefix, ttl_s=ttl_s)

    def key(self, tenant: str, session_id: str) -> str:
        """The session's hash. The fleet's session ids are already tenant-scoped (the pipeline's
        `session_key`); the tenant stays in the key so that the store keeps tenants apart on its
        own too."""
        return f"{self._prefix}aff:{tenant}:{session_id}"

    async def fetch(self, tenant: str, session_id: str) -> SharedEntry | None:
        raw = await self.redis.hmget(self.key(tenant, session_id), ["v", "where", "tok", "at"])
        if raw[0] is None or raw[1] is None:
            return None
        return SharedEntry(
            Placement.decode(_text(raw[1])), int(raw[0]), int(raw[2] or 0), int(raw[3] or 0)
        )

    async def commit(
        self,
        tenant: str,
        session_id: str,
        placement: Placement,
        *,
        expected_version: int,
        cached_tokens: int,
        seen_ms: int,
    ) -> CommitResult:
        """Record that the session's last call was served at `placement`. Same placement as the
        shared one: a refresh. A different one is a move, applied only if the version is still
        `expected_version` (or the session has no entry); else the other process's move wins."""
        args: list[str | int] = [
            expected_version,
            placement.encode(),
            cached_tokens,
            seen_ms,
            self._ttl_ms,
        ]
        won, v, where, tok, at = await self._commit(keys=[self.key(tenant, session_id)], args=args)
        entry = SharedEntry(Placement.decode(_text(where)), int(v), int(tok or 0), int(at or 0))
        return CommitResult(bool(won), entry)

    async def aclose(self) -> None:
        await self.redis.aclose()
