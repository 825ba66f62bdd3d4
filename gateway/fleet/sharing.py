"""What several gateway processes share about the fleet, through one Redis: session affinity
(`affinity_sync`), the prefix index feed (`index_feed`) and each replica's slots (`shared_slots`).
The fleet calls these hooks; without a `redis_url` there is no sharing and each process decides
on its own view and counts its own slots.

Owns the wiring of the three and their lifecycle; no decisions here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, MutableMapping

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from gateway.fleet.affinity_store import Placement, RedisAffinity
from gateway.fleet.affinity_sync import SharedAffinity
from gateway.fleet.index_feed import IndexFeed
from gateway.fleet.shared_link import SharedLink
from gateway.fleet.shared_slots import SharedSlots
from gateway.fleet.slot_store import RedisSlots
from gateway.ports import Attempt, PreparedPrompt
from routing.prefix_index import PrefixIndex
from routing.types import SessionEntry, replica_key


class FleetSharing:
    def __init__(self, affinity: SharedAffinity, feed: IndexFeed, slots: SharedSlots) -> None:
        self.affinity, self.feed, self.slots = affinity, feed, slots
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        sessions: MutableMapping[str, SessionEntry],
        index: Callable[[], PrefixIndex],
        clock: Callable[[], float],
        key_prefix: str = "lantern:fleet:",
        session_ttl_s: float = 3600.0,
        slot_lease_s: float = 15.0,
        registry: CollectorRegistry | None = None,
    ) -> FleetSharing:
        """One short-timeout pool for lookups, commits and publishes, one for slots; the
        subscribers have their own connections without a read timeout (they wait for messages)."""
        link = SharedLink(clock, registry=registry)
        store = RedisAffinity.from_url(url, key_prefix=key_prefix, ttl_s=session_ttl_s)
        affinity = SharedAffinity(
            store, sessions, link, clock=clock, wall_ms=lambda: int(time.time() * 1000)
        )
        listener = Redis.from_url(url, socket_connect_timeout=1.0, health_check_interval=10)
        channel = f"{key_prefix}index"
        feed = IndexFeed(store.redis, listener, index, link, channel=channel, clock=clock)
        slot_store = RedisSlots.from_url(url, key_prefix=key_prefix, lease_s=slot_lease_s)
        slot_listener = Redis.from_url(url, socket_connect_timeout=1.0, health_check_interval=10)
        slots = SharedSlots(slot_store, slot_listener, link, clock)
        return cls(affinity, feed, slots)

    async def recall(self, tenant: str, session_id: str) -> None:
        await self.affinity.recall(tenant, session_id)

    def on_dispatch(
        self, attempt: Attempt, session_id: str, prepared: PreparedPrompt, prompt_tokens: int
    ) -> None:
        c = attempt.candidate
        key = replica_key(c.backend_name, c.replica) if c.venue == "selfhost" else None
        placement = Placement(c.venue, c.backend_name, key)
        self.affinity.publish(session_id, placement, prompt_tokens, attempt.reason)
        if key is not None and attempt.indexed:
            self.feed.publish(key, prepared.prefix_hashes)

    def on_extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        c = attempt.candidate
        if c.venue == "selfhost" and attempt.indexed:
            self.feed.publish(replica_key(c.backend_name, c.replica), chain_hashes)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.feed.run()), loop.create_task(self.slots.run())]

    async def stop(self) -> None:
        await self.affinity.flush()
        await self.feed.flush()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.affinity.store.aclose()
        await self.feed.aclose()
        await self.slots.aclose()
