"""Where keyed replies are kept: the `ReplayStore` protocol and the in-process store (one
process; the reference path of the Redis store, which every process shares), bounded as a
`TenantTable` by records and by the bytes of their entries: one tenant's burst of keys, or of
large replies, never pushes out another's records.

A claim is decided in one step (nobody runs a key twice); every write is fenced, so an owner
whose lease ran out and was taken over writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cachekeys.tenant_table import TenantTable
from gateway.replay.records import Claim, Entry, Page, RecordState, split_scope


class ReplayStore(Protocol):
    async def claim(self, scope: str, fingerprint: str, lease_s: float, ttl_s: float) -> Claim:
        """Create the record (`new`, fence 1), take over one whose lease ran out (`new`, the
        next fence, its entries dropped), or report it as found."""
        ...

    async def append(
        self, scope: str, fence: int, entries: Sequence[Entry], lease_s: float, ttl_s: float
    ) -> bool:
        """Add entries (an `end` entry sets the state); renews the lease. False: not ours."""
        ...

    async def renew(self, scope: str, fence: int, lease_s: float) -> bool: ...

    async def release(self, scope: str, fence: int) -> None:
        """Forget a running record (its reply is not to be replayed: the key is free)."""
        ...

    async def read(self, scope: str, after: int, block_s: float) -> Page:
        """Entries from index `after` on, waiting up to `block_s` for one when none are there
        yet and the record is still running."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class _Record:
    fingerprint: str
    fence: int
    lease_until: float
    expires_at: float
    state: RecordState = "running"
    entries: list[Entry] = field(default_factory=list)
    num_bytes: int = 0  # of the entries' data: what the table weighs it by
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class MemoryReplayStore:
    """Records in this process's memory; `sweep` (run in the background) drops expired ones.
    Past `max_records` records or `max_bytes` of their entries in all, the tenant holding the
    most (records or bytes) loses its oldest record (a retry of its key then runs again)."""

    def __init__(
        self,
        clock: Callable[[], float],
        max_records: int = 10_000,
        *,
        max_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self._clock = clock
        self._records: TenantTable[str, _Record] = TenantTable(
            max_records,
            on_evict=lambda _key, record: record.notify(),
            weigh=_num_bytes,
            max_weight=max_bytes,
        )

    async def claim(self, scope: str, fingerprint: str, lease_s: float, ttl_s: float) -> Claim:
        now = self._clock()
        found = self._live(scope, now)
        if found is None:
            self._records[split_scope(scope)] = _Record(fingerprint, 1, now + lease_s, now + ttl_s)
            return Claim("new", 1)
        if found.fingerprint != fingerprint:
            return Claim("mismatch", found.fence)
        if found.state != "running":
            return Claim(found.state, found.fence)
        if found.lease_until > now:
            return Claim("running", found.fence)
        found.fence += 1
        found.lease_until, found.expires_at = now + lease_s, now + ttl_s
        found.entries.clear()
        self._resize(scope, found, 0)
        found.notify()
        return Claim("new", found.fence)

    async def append(
        self, scope: str, fence: int, entries: Sequence[Entry], lease_s: float, ttl_s: float
    ) -> bool:
        record = self._owned(scope, fence)
        if record is None:
            return False
        now = self._clock()
        for entry in entries:
            if entry.kind == "end":
                record.state = "done" if entry.data == b"done" else "too_large"
                record.expires_at = now + ttl_s
        record.lease_until = now + lease_s
        if record.state == "too_large":
            record.entries.clear()
            self._resize(scope, record, 0)
        else:
            record.entries.extend(entries)
            self._resize(scope, record, record.num_bytes + sum(len(e.data) for e in entries))
        record.notify()
        return True

    async def renew(self, scope: str, fence: int, lease_s: float) -> bool:
        record = self._owned(scope, fence)
        if record is not None:
            record.lease_until = self._clock() + lease_s
        return record is not None

    async def release(self, scope: str, fence: int) -> None:
        record = self._owned(scope, fence)
        if record is not None:
            del self._records[split_scope(scope)]
            record.notify()

    async def read(self, scope: str, after: int, block_s: float) -> Page:
        record = self._live(scope, self._clock())
        if record is not None and record.state == "running" and len(record.entries) <= after:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(record.changed.wait(), block_s)
            record = self._live(scope, self._clock())
        if record is None:
            return Page((), None, 0, False)
        is_leased = record.lease_until > self._clock()
        return Page(tuple(record.entries[after:]), record.state, record.fence, is_leased)

    def sweep(self) -> int:
        """Drop records past their retention; returns how many."""
        now = self._clock()
        gone = [key for key, r in self._records.items() if r.expires_at <= now]
        for key in gone:
            self._records.pop(key).notify()
        return len(gone)

    async def aclose(self) -> None:
        self._records.clear()

    def _resize(self, scope: str, record: _Record, num_bytes: int) -> None:
        """Weigh the record again after its entries changed: out of the table and back in as
        the tenant's newest, which may push out the heaviest tenant's oldest records (never
        this one: `max_bytes` is at least the largest reply stored)."""
        key = split_scope(scope)
        del self._records[key]
        record.num_bytes = num_bytes
        self._records[key] = record

    def _live(self, scope: str, now: float) -> _Record | None:
        key = split_scope(scope)
        record = self._records.get(key)
        if record is not None and record.expires_at <= now:
            del self._records[key]
            return None
        return record

    def _owned(self, scope: str, fence: int) -> _Record | None:
        record = self._records.get(split_scope(scope))
        if record is None or record.fence != fence or record.state != "running":
            return None
        return record


def _num_bytes(record: _Record) -> int:
    return record.num_bytes
