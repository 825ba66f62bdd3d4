"""Stored responses, keyed by (tenant, response id): the protocol and the in-process store.

A tenant's lookup can only ever find that tenant's own responses: the tenant is part of every
key. Holds the conversation items needed to continue, never anything about other tenants.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from adapters.types import JSON
from cachekeys.tenant_table import TenantTable

SEPARATOR = b"\n"  # between a stored reply, its conversation and the items' ids


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """`conversation`: every input and output item so far, in order; `response`: the reply
    object as the client got it (what `GET /v1/responses/{id}` answers); `num_bytes`: its
    stored size, when read from a store (what continuing it weighs); `item_ids`: the
    conversation's item ids, in order (kept beside the items, so that the items themselves
    stay as the client sent them; empty for a response stored before ids were kept)."""

    conversation: tuple[Mapping[str, JSON], ...]
    response: Mapping[str, JSON]
    num_bytes: int = field(default=0, compare=False)
    item_ids: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        """The reply, a newline (orjson writes none inside), the conversation, a newline and
        the ids: a `GET` reads the reply alone, never the conversation (megabytes, for a long
        chain)."""
        conversation = orjson.dumps(list(self.conversation))
        ids = orjson.dumps(list(self.item_ids))
        return orjson.dumps(self.response) + SEPARATOR + conversation + SEPARATOR + ids

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredResponse:
        head, separator, rest = data.partition(SEPARATOR)
        if not separator:  # stored as one object, before the reply came first
            doc: dict[str, Any] = orjson.loads(data)
            return cls(tuple(doc["conversation"]), doc["response"], len(data))
        conversation, _, ids = rest.partition(SEPARATOR)  # no ids: stored before they were
        item_ids = tuple(orjson.loads(ids)) if ids else ()
        return cls(tuple(orjson.loads(conversation)), orjson.loads(head), len(data), item_ids)


class PutOutcome(enum.Enum):
    """What a put did. A put never replaces a stored response, nor brings back one deleted
    within its TTL, nor evicts a tenant's responses for one that could never fit."""

    STORED = "stored"
    DELETED = "deleted"  # deleted before it was stored (a DELETE while it still streamed)
    TAKEN = "taken"  # another response holds the id (an upstream that reuses ids): kept
    TOO_LARGE = "too_large"  # more bytes than the store's whole bound


def reply_json(data: bytes) -> bytes | None:
    """The reply's JSON, as stored, from the first bytes of a stored response (all of them, or
    the head a `GET` reads), its conversation left unread; None when they hold no separator
    (a reply longer than the head, or a response stored as one object)."""
    end = data.find(SEPARATOR)
    return data[:end] if end >= 0 else None


def legacy_reply_json(data: bytes) -> bytes:
    """The reply's JSON from all of a response's bytes with no separator: a response stored
    as one object, before the reply came first."""
    return orjson.dumps(StoredResponse.from_bytes(data).response)


class ResponseStore(Protocol):
    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        """Keep `data` (`StoredResponse.to_bytes`, encoded by the caller, so that a long
        conversation may be encoded in a worker thread), unless the id is stored already or
        was deleted within the TTL (checked and written in one step)."""
        ...

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None: ...

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        """The stored bytes unparsed (`StoredResponse.from_bytes` reads them), so that the
        caller may parse a long conversation in a worker thread."""
        ...

    async def get_reply(self, tenant: str, response_id: str) -> bytes | None:
        """The stored reply alone (`StoredResponse.response`'s JSON, as stored, served as it
        is), its conversation left unread."""
        ...

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Remove the response (True when it was stored) and remember the id as deleted for
        the TTL, so that a put still on its way (a stream not yet finished) does not bring
        it back; the tenant's deleted ids are bounded like its responses."""
        ...

    async def aclose(self) -> None: ...


class MemoryResponseStore:
    """One process's stored responses, each kept `ttl_s`; past `max_entries` or `max_bytes`
    in all, the tenant holding the most (entries or bytes) loses its oldest
    (cachekeys/tenant_table.py), so one tenant's burst never evicts another's share. Each
    entry holds its whole conversation, so the bytes are the bound that holds memory: a chain
    of long turns is far larger than its count. Entries are kept serialised, so no caller
    ever shares an object. Deleted ids are kept `ttl_s` too, in a table bounded the same way
    by entries."""

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
        self._max_bytes = max_bytes
        self._deleted: TenantTable[str, float] = TenantTable(max_entries)  # id -> expiry

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        key = (tenant, response_id)
        deleted_until = self._deleted.get(key)
        if deleted_until is not None and deleted_until > self._clock():
            return PutOutcome.DELETED
        if self._live(tenant, response_id) is not None:
            return PutOutcome.TAKEN
        if len(data) > self._max_bytes:
            return PutOutcome.TOO_LARGE
        self._entries[key] = (self._clock() + self._ttl_s, data)
        return PutOutcome.STORED

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        data = self._live(tenant, response_id)
        return None if data is None else StoredResponse.from_bytes(data)

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        return self._live(tenant, response_id)

    async def get_reply(self, tenant: str, response_id: str) -> bytes | None:
        data = self._live(tenant, response_id)
        if data is None:
            return None
        reply = reply_json(data)
        return legacy_reply_json(data) if reply is None else reply

    def _live(self, tenant: str, response_id: str) -> bytes | None:
        found = self._entries.get((tenant, response_id))
        if found is None:
            return None
        expires, data = found
        if expires <= self._clock():
            del self._entries[(tenant, response_id)]
            return None
        return data

    async def delete(self, tenant: str, response_id: str) -> bool:
        key = (tenant, response_id)
        self._deleted[key] = self._clock() + self._ttl_s
        return self._entries.pop(key, None) is not None

    async def aclose(self) -> None:
        self._entries.clear()
        self._deleted.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _num_bytes(entry: tuple[float, bytes]) -> int:
    return len(entry[1])
