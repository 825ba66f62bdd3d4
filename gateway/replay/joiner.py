"""Reading a record from the store: a finished reply replayed, or a running one followed as it
is written by another process (from the start; the doors' events carry no ids to resume from).
A follower stops when the record's owner is gone (lease out, or taken over): its client sees
the reply cut short and retries, and that retry takes the record over."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from gateway.replay.errors import IdempotencyKeyInUse, ReplyNotStored
from gateway.replay.records import Entry, Page, ReplayLimits, ReplyHead
from gateway.replay.store import ReplayStore

FOLLOW_BLOCK_S = 1.0


@dataclass(frozen=True, slots=True)
class Joined:
    head: ReplyHead
    chunks: AsyncIterator[bytes]


class _Cursor:
    """Position in one record, pinned to the fence it was joined under."""

    def __init__(self, store: ReplayStore, scope: str) -> None:
        self.store, self.scope = store, scope
        self.after = 0
        self.fence: int | None = None

    async def page(self, block_s: float) -> Page | None:
        """The next entries; None when the record is gone, abandoned or taken over."""
        page = await self.store.read(self.scope, self.after, block_s)
        if page.state is None or (self.fence is not None and page.fence != self.fence):
            return None
        self.fence = page.fence
        self.after += len(page.entries)
        if not page.entries and page.state == "running" and not page.is_leased:
            return None
        return page


async def join(
    store: ReplayStore, scope: str, limits: ReplayLimits, clock: Callable[[], float]
) -> Joined | None:
    """The record's reply: a stream as it comes, a JSON reply once complete (waiting up to
    `limits.wait_s`, then `IdempotencyKeyInUse`). None: nothing to join (claim again)."""
    deadline = clock() + limits.wait_s
    cursor = _Cursor(store, scope)
    entries: list[Entry] = []
    while not entries or (not ReplyHead.from_entry(entries[0]).is_stream and not _ended(entries)):
        left_s = deadline - clock()
        if left_s <= 0:
            raise IdempotencyKeyInUse()
        page = await cursor.page(min(left_s, FOLLOW_BLOCK_S))
        if page is None:
            return None
        if page.state == "too_large":
            raise ReplyNotStored(limits.max_reply_bytes)
        entries.extend(page.entries)
    head = ReplyHead.from_entry(entries[0])
    return Joined(head, _chunks(cursor, entries[1:]))


def _ended(entries: list[Entry]) -> bool:
    return entries[-1].kind == "end"


async def _chunks(cursor: _Cursor, first: list[Entry]) -> AsyncIterator[bytes]:
    entries = first
    while True:
        for entry in entries:
            if entry.kind == "end":
                return
            yield entry.data
        page = await cursor.page(FOLLOW_BLOCK_S)
        if page is None or page.state == "too_large":
            return  # the owner is gone or stopped storing: the reply ends here
        entries = list(page.entries)
