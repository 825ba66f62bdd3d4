"""Stored responses, keyed by (tenant, response id): the protocol and the in-process store.

A tenant's lookup can only ever find that tenant's own responses: the tenant is part of every
key. Holds the conversation items needed to continue, never anything about other tenants.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from adapters.types import JSON
from cachekeys.tenant_table import TenantTable


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """`conversation`: every input and output item so far, in order; `response`: the reply
    object as the client got it (what `GET /v1/responses/{id}` answers); `num_bytes`: its
    stored size, when read from a store (what continuing it weighs)."""

    conversation: tuple[Mapping[str, JSON], ...]
    response: Mapping[str, JSON]
    num_bytes: int = field(default=0, compare=False)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"conversation": list(self.conversation), "response": self.response})

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredResponse:
        doc: dict[str, Any] = orjson.loads(data)
        return cls(tuple(doc["conversation"]), doc["response"], len(data))


class ResponseStore(Protocol):
    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None: ...

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def delete(self, tenant: str, response_id: str) -> bool: ...

    async def aclose(self) -> None: ...


class MemoryResponseStore:
    """One process's stored responses, each kept `ttl_s`; past `max_entries` or `max_bytes`
    in all, the tenant holding the most (entries or bytes) loses its oldest
    (cachekeys/tenant_table.py), so one tenant's burst never evicts another's share. Each
    entry holds its whole conversation, so the bytes are the bound that holds memory: a chain
    of long turns is far larger than its count. Entries are kept serialised, so no caller
    ever shares an object."""

    def __init__(
        self,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 1024 * 1024 * 1024,
    ) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: TenantTable[str, tuple[float, bytes]] = TenantTable(
            max_entries, weigh=_num_bytes, max_weight=max_bytes
        )

    async def put(self, tenant: str, response_id: str, stored: StoredResponse) -> None:
        self._entries[(tenant, response_id)] = (self._clock() + self._ttl_s, stored.to_bytes())

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        found = self._entries.get((tenant, response_id))
        if found is None:
            return None
        expires, data = found
        if expires <= self._clock():
            del self._entries[(tenant, response_id)]
            return None
        return StoredResponse.from_bytes(data)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._entries.pop((tenant, response_id), None) is not None

    async def aclose(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _num_bytes(entry: tuple[float, bytes]) -> int:
    return len(entry[1])
