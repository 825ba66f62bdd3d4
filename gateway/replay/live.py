"""A reply being produced in this process, as every reader in this process follows it: the
first client, and retries that land here while it runs. Holds the whole reply until it ends
(also past the store's size cap: the reader that asked first is served in full)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from gateway.replay.records import ReplyHead


class LiveRun:
    def __init__(self) -> None:
        self.head: ReplyHead | None = None
        self.chunks: list[bytes] = []
        self.is_done = False
        self.is_kept = True  # False: the reply is not replayable (not a 200); retries run again
        self.failure: BaseException | None = None
        self._changed = asyncio.Event()

    def start(self, head: ReplyHead, is_kept: bool) -> None:
        self.head, self.is_kept = head, is_kept
        self._notify()

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self._notify()

    def finish(self, failure: BaseException | None = None) -> None:
        self.is_done, self.failure = True, failure
        self._notify()

    async def wait_head(self, timeout_s: float | None) -> ReplyHead | None:
        """The head once known; None when the run failed without one (TimeoutError past
        `timeout_s`)."""
        async with asyncio.timeout(timeout_s):
            while self.head is None and not self.is_done:
                await self._changed.wait()
        return self.head

    async def wait_done(self, timeout_s: float | None) -> None:
        async with asyncio.timeout(timeout_s):
            while not self.is_done:
                await self._changed.wait()

    async def follow(self) -> AsyncIterator[bytes]:
        """Every chunk from the first, as it comes, until the reply ends."""
        sent = 0
        while True:
            changed = self._changed
            while sent < len(self.chunks):
                sent += 1
                yield self.chunks[sent - 1]
            if self.is_done:
                return
            await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
