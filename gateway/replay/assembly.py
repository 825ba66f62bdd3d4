"""Builds the replay service from settings: the Redis store when `redis_url` is set (shared
by every process), else the in-process one with its background expiry pass."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from gateway.replay.records import ReplayLimits
from gateway.replay.redis_store import RedisReplayStore
from gateway.replay.service import ReplayService
from gateway.replay.store import MemoryReplayStore
from gateway.settings import Settings

log = logging.getLogger("lantern.replay")


@dataclass
class ReplayParts:
    service: ReplayService
    memory: MemoryReplayStore | None  # swept here; Redis expires its records itself
    sweep_interval_s: float
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        if self.memory is not None:
            self._tasks.append(asyncio.create_task(self._sweep_forever(self.memory)))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.service.stop()

    async def _sweep_forever(self, memory: MemoryReplayStore) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            removed = memory.sweep()
            if removed:
                log.info("replay: %d expired records removed", removed)


def build_replay(settings: Settings) -> ReplayParts:
    cfg = settings.replay
    limits = ReplayLimits(cfg.retention_s, cfg.lease_s, cfg.wait_s, cfg.max_reply_bytes)
    if settings.redis_url:
        shared = RedisReplayStore.from_url(
            settings.redis_url, cfg.max_records, max_bytes=cfg.max_bytes
        )
        return ReplayParts(ReplayService(shared, limits), None, cfg.sweep_interval_s)
    memory = MemoryReplayStore(time.monotonic, cfg.max_records, max_bytes=cfg.max_bytes)
    return ReplayParts(ReplayService(memory, limits), memory, cfg.sweep_interval_s)
