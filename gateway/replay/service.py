"""What a keyed request gets: it runs (first, or taking over a record whose owner died), it
joins the run in progress, or it replays the stored reply; the same key with another request
is refused. The run is a task of its own, so it finishes and is stored when the client leaves.
Knows no HTTP: a reply is a `ReplyHead` and its byte chunks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from gateway.replay.errors import (
    IdempotencyKeyInUse,
    IdempotencyKeyReused,
    ReplayStoreUnavailable,
    ReplyNotStored,
)
from gateway.replay.joiner import Joined, join
from gateway.replay.live import LiveRun
from gateway.replay.recorder import Recording, keep_leased
from gateway.replay.records import ReplayLimits, ReplyHead
from gateway.replay.store import ReplayStore

log = logging.getLogger("lantern.replay")
MAX_CLAIMS = 3  # a record released or taken over this often while we looked: 409


@dataclass(frozen=True, slots=True)
class Produced:
    """A reply as the door made it; `is_kept` False (not a 200): served once, key released."""

    head: ReplyHead
    chunks: AsyncIterator[bytes]
    is_kept: bool


@dataclass(frozen=True, slots=True)
class Served:
    head: ReplyHead
    chunks: AsyncIterator[bytes]
    is_replayed: bool


Produce = Callable[[], Awaitable[Produced]]


class ReplayService:
    def __init__(
        self,
        store: ReplayStore,
        limits: ReplayLimits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.limits = limits
        self._clock = clock
        self._live: dict[str, LiveRun] = {}  # runs this process owns, by scope
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, scope: str, fingerprint: str, produce: Produce) -> Served:
        lim = self.limits
        for _ in range(MAX_CLAIMS):
            claim = await self.store.claim(scope, fingerprint, lim.lease_s, lim.retention_s)
            if claim.kind == "new":
                return await self._run(scope, claim.fence, produce)
            if claim.kind == "mismatch":
                raise IdempotencyKeyReused()
            if claim.kind == "too_large":
                raise ReplyNotStored(lim.max_reply_bytes)
            live = self._live.get(scope)
            if live is not None:
                joined = await self._follow_live(live)
            else:
                joined = await join(self.store, scope, lim, self._clock)
            if joined is not None:
                return Served(joined.head, joined.chunks, is_replayed=True)
        raise IdempotencyKeyInUse()

    async def _run(self, scope: str, fence: int, produce: Produce) -> Served:
        """Start the run as its own task and serve it as the first of its readers."""
        live = self._live[scope] = LiveRun()
        task = asyncio.create_task(self._produce(scope, fence, produce, live))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        head = await live.wait_head(None)
        if head is None:
            assert live.failure is not None
            raise live.failure
        if not head.is_stream:
            await live.wait_done(None)
        return Served(head, live.follow(), is_replayed=False)

    async def _produce(self, scope: str, fence: int, produce: Produce, live: LiveRun) -> None:
        lease = asyncio.create_task(keep_leased(self.store, scope, fence, self.limits.lease_s))
        try:
            made = await produce()
            if made.is_kept:
                live.start(made.head, is_kept=True)
                await Recording(self.store, scope, fence, self.limits).run(
                    made.head, made.chunks, live
                )
            else:
                await self.store.release(scope, fence)
                live.start(made.head, is_kept=False)
                async for chunk in made.chunks:
                    live.add(chunk)
            live.finish()
        except Exception as exc:  # no reply to keep: the key is free again
            log.exception("replay: a keyed call failed outside its door's error handling")
            live.finish(exc)
            with contextlib.suppress(ReplayStoreUnavailable):
                await self.store.release(scope, fence)
        except BaseException as exc:  # cancelled (shutdown): the lease runs out, a retry runs it
            live.finish(exc)
            raise
        finally:
            lease.cancel()
            if self._live.get(scope) is live:
                del self._live[scope]

    async def _follow_live(self, live: LiveRun) -> Joined | None:
        """A run of this process, from its memory; None when it kept no reply (claim again)."""
        deadline = self._clock() + self.limits.wait_s
        try:
            head = await live.wait_head(self.limits.wait_s)
            if head is not None and not head.is_stream:
                await live.wait_done(max(0.0, deadline - self._clock()))
        except TimeoutError:
            raise IdempotencyKeyInUse() from None
        if head is None or not live.is_kept or live.failure is not None:
            return None  # its record is released: the key is free
        return Joined(head, live.follow())

    async def stop(self) -> None:
        """Cancel the runs still going: their records' leases run out, retries take over."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.store.aclose()
