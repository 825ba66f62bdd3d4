"""Replica health off the request path: real one-token probes, drain and cooldown of a failing
replica (its prefix index is cleared), and the sweep of idle sessions that runs with the checks.
No routing here: the router reads `healthy` and `drained_until` from the records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.fleet.probe import probe
from gateway.fleet.registry import FleetRegistry
from gateway.fleet.window import ContextWindows

log = logging.getLogger("lantern.fleet")


class ReplicaHealth:
    def __init__(
        self,
        registry: FleetRegistry,
        windows: ContextWindows,
        *,
        clock: Callable[[], float],
        cooldown_s: float,
        probe_timeout_s: float,
        session_max_idle_s: float,
    ) -> None:
        self._reg, self._windows, self._clock = registry, windows, clock
        self._cooldown_s, self._probe_timeout_s = cooldown_s, probe_timeout_s
        self._session_max_idle_s = session_max_idle_s

    def drain(self, key: str, now: float, why: str = "backend faults") -> None:
        """Take `key` out for the cool-down (its sessions move, its index is cleared)."""
        log.warning("replica %s drained for %.0f s (%s)", key, self._cooldown_s, why)
        r = self._reg.replicas[key]
        r.healthy = False
        r.drained_until = now + self._cooldown_s
        self._reg.index.clear(key)

    async def check(self) -> dict[str, bool]:
        """Probe every replica not cooling down with a real one-token generation. A replica
        whose probe failed but which ended a call well while the probe waited is busy, not down
        (the probe queued behind the calls it serves): it stays, and answers True here."""
        now = self._clock()
        due = [(k, r) for k, r in self._reg.replicas.items() if now >= r.drained_until]
        await self._windows.learn(r.candidate for _, r in due)
        sent = self._clock()
        results = await asyncio.gather(
            *(probe(r.candidate, r.model, self._probe_timeout_s) for _, r in due)
        )
        health: dict[str, bool] = {}
        for (key, r), ok in zip(due, results, strict=True):
            served = r.served_at is not None and r.served_at >= sent
            if ok:
                r.healthy, r.failures = True, 0
            elif served:
                log.info("probe of %s failed while it served calls: busy, kept", key)
            else:
                self.drain(key, self._clock(), "its probe failed")
            health[key] = ok or served
        return health

    async def run(self, interval_s: float) -> None:
        """Check and sweep forever (start as a task in the lifespan; cancel on shutdown)."""
        while True:
            await self.check()
            self.sweep_sessions()
            await asyncio.sleep(interval_s)

    def sweep_sessions(self) -> None:
        reg, now = self._reg, self._clock()
        stale = [s for s, e in reg.sessions.items() if now - e.last_seen > self._session_max_idle_s]
        for s in stale:
            del reg.sessions[s]
        # plans of sessions that never completed; a dispatch racing this falls back to hashes
        reg.planned = {s: v for s, v in reg.planned.items() if s in reg.sessions}
