"""A replica's slots shared by every gateway process through Redis: one sorted set per replica,
a member per slot held (a lease id), scored by the lease's expiry on Redis's own clock. Taking a
slot is one Lua script (drop expired leases, count, add), so the capacity holds within one call;
a process that dies leaves its leases to expire. A release publishes the replica's key.

Owns the Redis keys and scripts; who waits for a slot, and in what order, is `shared_slots`.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

# Redis's clock in ms, so that processes on different machines agree on a lease's expiry
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS[1] the replica's set. ARGV: capacity, lease id, lease ms. Returns 1 when the slot is taken.
_ACQUIRE = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
)

# KEYS[1] the replica's set. ARGV: lease id, channel, replica key. Returns 1 when it was held.
_RELEASE = """
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n == 1 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return n
"""

# KEYS[1] the replica's set. ARGV: lease ms, lease ids. Returns how many were still held.
_RENEW = (
    _NOW
    + """
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
"""
)


class RedisSlots:
    """Leases of `lease_s`; the holder renews them (`renew`) while its calls run."""

    def __init__(self, redis: Redis, *, key_prefix: str, lease_s: float) -> None:
        self.redis, self._prefix = redis, key_prefix
        self.lease_ms = int(lease_s * 1000)
        self.channel = f"{key_prefix}slots"
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)

    @classmethod
    def from_url(
        cls, url: str, *, key_prefix: str, lease_s: float, timeout_s: float = 1.0
    ) -> RedisSlots:
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=32,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
        return cls(Redis(connection_pool=pool), key_prefix=key_prefix, lease_s=lease_s)

    def key(self, replica: str) -> str:
        return f"{self._prefix}slots:{replica}"

    async def acquire(self, replica: str, capacity: int, lease: str) -> bool:
        """Take a slot of `replica` as `lease` when fewer than `capacity` are held."""
        taken = await self._acquire(keys=[self.key(replica)], args=[capacity, lease, self.lease_ms])
        return bool(taken)

    async def release(self, replica: str, lease: str) -> None:
        await self._release(keys=[self.key(replica)], args=[lease, self.channel, replica])

    async def renew(self, replica: str, leases: list[str]) -> int:
        """Push the leases' expiry on; how many were still held (a lease that expired while
        this process stalled is gone: its slot may have gone to another call)."""
        args: list[str | int] = [self.lease_ms, *leases]
        return int(await self._renew(keys=[self.key(replica)], args=args))

    async def held(self, replica: str) -> int:
        return int(await self.redis.zcard(self.key(replica)))

    async def aclose(self) -> None:
        await self.redis.aclose()
