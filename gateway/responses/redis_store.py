"""Stored responses in Redis, shared by every gateway process: one key per (tenant, id) with a
TTL. Only this module talks to Redis for responses; the key names the tenant first."""

from __future__ import annotations

from redis.asyncio import Redis

from gateway.responses.store import StoredResponse

KEY_PREFIX = "lantern:resp:"


class RedisResponseStore:
    def __init__(self, client: Redis, ttl_s: int, key_prefix: str = KEY_PREFIX) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._prefix = key_prefix

    @classmethod
    def from_url(cls, url: str, ttl_s: int, key_prefix: str = KEY_PREFIX) -> RedisResponseStore:
        return cls(Redis.from_url(url, socket_timeout=5.0), ttl_s, key_prefix)

    def _key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}{{{tenant}}}:{response_id}"

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None:
        await self._client.set(self._key(tenant, response_id), stored.to_bytes(), ex=self._ttl_s)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        data = await self._client.get(self._key(tenant, response_id))
        if data is None:
            return None
        return StoredResponse.from_bytes(data if isinstance(data, bytes) else data.encode())

    async def delete(self, tenant: str, response_id: str) -> bool:
        return bool(await self._client.delete(self._key(tenant, response_id)))

    async def aclose(self) -> None:
        await self._client.aclose()
