"""The prefix index shared by every gateway process: each process publishes the block hashes it
sends to (and receives from) a replica on one Redis channel, and inserts what the others publish
into its own index, so a decision over the index does not depend on which process took the call.

Owns the wire form of one feed message and the subscriber loop; the index itself stays pure.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.fleet.affinity_sync import STORE_ERRORS
from gateway.fleet.shared_link import SharedLink
from routing.prefix_index import PrefixIndex

log = logging.getLogger("lantern.fleet.index")
ORIGIN_BYTES = 8
_HEAD = struct.Struct("<8sHB")  # origin, replica key length, hash length


@dataclass(frozen=True, slots=True)
class FeedMessage:
    origin: bytes
    replica: str
    hashes: tuple[bytes, ...]

    def encode(self) -> bytes:
        key = self.replica.encode()
        width = len(self.hashes[0]) if self.hashes else 0
        if any(len(h) != width for h in self.hashes):
            raise ValueError("feed hashes must share one length")
        return _HEAD.pack(self.origin, len(key), width) + key + b"".join(self.hashes)

    @staticmethod
    def decode(data: bytes) -> FeedMessage:
        origin, key_len, width = _HEAD.unpack_from(data)
        start = _HEAD.size + key_len
        replica = data[_HEAD.size : start].decode()
        body = data[start:]
        if width == 0 or len(body) % width:
            raise ValueError("malformed index feed message")
        hashes = tuple(body[i : i + width] for i in range(0, len(body), width))
        return FeedMessage(origin, replica, hashes)


class IndexFeed:
    """`publisher` has a short timeout (a publish is fire-and-forget); `listener` none (the
    subscriber waits for messages). `index` returns the fleet's current index (a benchmark may swap it). Messages from this
    process (`origin`) are skipped; replicas this process does not know are ignored."""

    def __init__(
        self,
        publisher: Redis,
        listener: Redis,
        index: Callable[[], PrefixIndex],
        link: SharedLink,
        *,
        channel: str,
        clock: Callable[[], float],
        origin: bytes | None = None,
        reconnect_s: float = 1.0,
    ) -> None:
        self._publisher, self._listener = publisher, listener
        self._index, self.link = index, link
        self._channel, self._clock, self._reconnect_s = channel, clock, reconnect_s
        self.origin = origin or os.urandom(ORIGIN_BYTES)
        self._tasks: set[asyncio.Task[None]] = set()
        self.num_applied = 0
        self.is_subscribed = False

    def publish(self, replica: str, hashes: Sequence[bytes]) -> None:
        if not hashes or self.link.is_down and not self.link.should_try():
            return
        data = FeedMessage(self.origin, replica, tuple(hashes)).encode()
        task = asyncio.get_running_loop().create_task(self._send(data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, data: bytes) -> None:
        try:
            await self._publisher.publish(self._channel, data)
        except STORE_ERRORS as exc:
            self.link.failed("index_publish", exc)

    def apply(self, data: bytes) -> None:
        try:
            msg = FeedMessage.decode(data)
        except (ValueError, struct.error, UnicodeDecodeError):
            log.warning("ignored a malformed index feed message (%d bytes)", len(data))
            return
        index = self._index()
        if msg.origin == self.origin or index.capacity(msg.replica) == 0:
            return
        index.insert(msg.replica, msg.hashes, self._clock())
        self.num_applied += 1

    async def run(self) -> None:
        """Subscribe until cancelled; reconnect after a failure (what was published meanwhile
        is lost: the index is an estimate, and this process's own view fills the gap)."""
        while True:
            try:
                await self._listen()
            except STORE_ERRORS as exc:
                self.link.failed("index_subscribe", exc)
            self.is_subscribed = False
            await asyncio.sleep(self._reconnect_s)

    async def _listen(self) -> None:
        async with self._listener.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(self._channel)
            self.is_subscribed = True
            self.link.succeeded()
            while True:
                msg = await pubsub.get_message(timeout=None)
                if msg is not None and msg["type"] == "message":
                    self.apply(msg["data"])

    async def flush(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        await self._listener.aclose()
