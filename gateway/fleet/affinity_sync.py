"""Keeps the fleet's session table in step with the shared one (`affinity_store`): before a plan
the session's shared entry replaces the local one; after a call the entry it leaves is committed
(a refresh, or a fenced move). With the store down the local table decides, on purpose.

Owns the read-before-plan and the write-after-call; the table's entries are the registry's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass

from redis.exceptions import RedisError

from cachekeys.tenant_table import OwnedTable
from gateway.fleet.affinity_store import Placement, RedisAffinity, SharedEntry
from gateway.fleet.shared_link import SharedLink
from routing.types import SessionEntry, VenueKind

log = logging.getLogger("lantern.fleet.affinity")
STORE_ERRORS = (RedisError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class _Read:
    tenant: str
    version: int  # 0: the session had no shared entry
    placement: Placement | None


class SharedAffinity:
    """`sessions` is the fleet's own table (written here with what the shared store says).
    `clock` is the fleet's monotonic clock, `wall_ms` the wall clock every process shares.
    The reads a commit is fenced by are kept for `max_tracked` sessions, bounded fairly by
    tenant: one tenant's flood of new sessions never drops another's read before its commit."""

    def __init__(
        self,
        store: RedisAffinity,
        sessions: MutableMapping[str, SessionEntry],
        link: SharedLink,
        *,
        clock: Callable[[], float],
        wall_ms: Callable[[], int],
        max_tracked: int = 100_000,
    ) -> None:
        self.store, self._sessions, self.link = store, sessions, link
        self._clock, self._wall_ms = clock, wall_ms
        self._reads: OwnedTable[_Read] = OwnedTable(max_tracked)
        self._tasks: set[asyncio.Task[None]] = set()
        self.num_moves = self.num_lost_moves = 0

    async def recall(self, tenant: str, session_id: str) -> None:
        """Bring the session's shared entry into the local table (before the plan)."""
        if not self.link.should_try():
            self.link.skipped("recall")
            return
        try:
            shared = await self.store.fetch(tenant, session_id)
        except STORE_ERRORS as exc:
            self.link.failed("recall", exc)
            return
        self.link.succeeded()
        self.link.recalled(shared is not None)
        if shared is None:
            self._track(session_id, _Read(tenant, 0, None))
            return
        self._adopt(session_id, shared)
        self._track(session_id, _Read(tenant, shared.version, shared.placement))

    def publish(
        self, session_id: str, placement: Placement, cached_tokens: int, reason: str = ""
    ) -> None:
        """The session's call was dispatched to `placement` (the router's `reason`): commit it
        (off the request path, while the call runs, so the session's next call finds it from any
        process). A session this process did not recall is not shared."""
        read = self._reads.get(session_id)
        if read is None:
            return
        if read.placement is not None and placement != read.placement:
            self.num_moves += 1
            log.info(
                "session %s moved from %s to %s by the router (%s, version %d)",
                session_id,
                read.placement.encode(),
                placement.encode(),
                reason or "unknown",
                read.version,
            )
        task = asyncio.get_running_loop().create_task(
            self._commit(session_id, read, placement, cached_tokens)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _commit(
        self, session_id: str, read: _Read, placement: Placement, cached_tokens: int
    ) -> None:
        if not self.link.should_try():
            self.link.skipped("commit")
            return
        try:
            result = await self.store.commit(
                read.tenant,
                session_id,
                placement,
                expected_version=read.version,
                cached_tokens=cached_tokens,
                seen_ms=self._wall_ms(),
            )
        except STORE_ERRORS as exc:
            self.link.failed("commit", exc)
            return
        self.link.succeeded()
        won = result.entry
        if not result.won:
            self.num_lost_moves += 1
            log.info(
                "session %s: move to %s lost to %s (version %d); following it",
                session_id,
                placement.encode(),
                won.placement.encode(),
                won.version,
            )
            self._adopt(session_id, won)
        self._track(session_id, _Read(read.tenant, won.version, won.placement))

    def _adopt(self, session_id: str, shared: SharedEntry) -> None:
        age_s = max(self._wall_ms() - shared.seen_ms, 0) / 1000
        p = shared.placement
        venue: VenueKind = "api" if p.venue == "api" else "selfhost"
        self._sessions[session_id] = SessionEntry(
            session_id, venue, p.backend, p.replica, self._clock() - age_s, shared.cached_tokens
        )

    def _track(self, session_id: str, read: _Read) -> None:
        self._reads.put(read.tenant, session_id, read)

    async def flush(self) -> None:
        """Wait for the commits still in flight (shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
