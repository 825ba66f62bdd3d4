"""Recording one reply as it is produced: every chunk goes to the `LiveRun` at once (its
readers in this process) and, in batches, to the store (readers anywhere, replays later). Past
the size cap the record is marked `too_large` and the rest of the reply is only served. The
store is never waited on between two chunks; the owner's lease is renewed by `keep_leased`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from gateway.replay.errors import ReplayStoreUnavailable
from gateway.replay.live import LiveRun
from gateway.replay.records import Entry, ReplayLimits, ReplyHead
from gateway.replay.store import ReplayStore

log = logging.getLogger("lantern.replay")


class Recording:
    """One owner's writes to one record, fenced; stops writing (and says so) once the store
    refuses them: the lease was lost, and the record belongs to whoever took it over."""

    def __init__(self, store: ReplayStore, scope: str, fence: int, limits: ReplayLimits) -> None:
        self.store = store
        self.scope = scope
        self.fence = fence
        self.limits = limits
        self._pending: list[Entry] = []
        self._wake = asyncio.Event()
        self._num_bytes = 0
        self._is_writing = True  # False once the store refused a write
        self._has_ended = False  # an end entry was queued: nothing more is stored
        self._is_closed = False

    async def run(self, head: ReplyHead, chunks: AsyncIterator[bytes], live: LiveRun) -> None:
        """Drain `chunks` to the end, whoever reads (the client may be gone). Cut short (the
        gateway stops), the record is left running: its lease runs out and a retry takes over."""
        writer = asyncio.create_task(self._write_batches())
        try:
            self._push(head.to_entry())
            async for chunk in chunks:
                live.add(chunk)
                self._push(Entry("chunk", chunk))
            self._push(Entry("end", b"done"))
        finally:
            self._is_closed = True
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def _push(self, entry: Entry) -> None:
        if self._has_ended:
            return
        self._num_bytes += len(entry.data)
        if self._num_bytes > self.limits.max_reply_bytes:
            entry = Entry("end", b"too_large")
        self._has_ended = entry.kind == "end"
        self._pending.append(entry)
        self._wake.set()

    async def _write_batches(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if batch and self._is_writing:
                self._is_writing = await self._append(batch)
            if (self._has_ended or self._is_closed) and not self._pending:
                return

    async def _append(self, batch: list[Entry]) -> bool:
        lim = self.limits
        try:
            ok = await self.store.append(
                self.scope, self.fence, batch, lim.lease_s, lim.retention_s
            )
        except ReplayStoreUnavailable:
            log.warning("replay: store unavailable; record %s left to its lease", self.scope)
            return False
        if not ok:
            log.warning("replay: lease on %s lost; another process owns it now", self.scope)
        return ok


async def keep_leased(store: ReplayStore, scope: str, fence: int, lease_s: float) -> None:
    """Renew the owner's lease every third of it until cancelled or refused (taken over)."""
    while True:
        await asyncio.sleep(lease_s / 3)
        with contextlib.suppress(ReplayStoreUnavailable):
            if not await store.renew(scope, fence, lease_s):
                return
