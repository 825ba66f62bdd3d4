"""Replica health off the request path: free probes (an engine's /health, an API's /models),
a one-token generation only where no free endpoint exists (rare, `paid_probe_interval_s`), drain and cooldown of a failing
replica (its prefix index is cleared), and the sweep of idle sessions that runs with the checks.
No routing here: the router reads `healthy` and `drained_until` from the records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx

from adapters.backend import free_health_check
from gateway.fleet.probe import free_probe, probe
from gateway.fleet.registry import FleetRegistry
from gateway.fleet.state import ReplicaRecord
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
        paid_probe_interval_s: float = 0.0,
    ) -> None:
        self._reg, self._windows, self._clock = registry, windows, clock
        self._cooldown_s, self._probe_timeout_s = cooldown_s, probe_timeout_s
        self._session_max_idle_s = session_max_idle_s
        self._paid_probe_interval_s = paid_probe_interval_s
        self._paid_at: dict[str, float] = {}  # replica key -> its last one-token probe
        self.num_paid_probes = 0

    def drain(self, key: str, now: float, why: str = "backend faults") -> None:
        """Take `key` out for the cool-down (its sessions move, its index is cleared)."""
        log.warning("replica %s drained for %.0f s (%s)", key, self._cooldown_s, why)
        r = self._reg.replicas[key]
        r.healthy = False
        r.drained_until = now + self._cooldown_s
        self._reg.index.clear(key)

    async def check(
        self, passive_s: float = 0.0, client: httpx.AsyncClient | None = None
    ) -> dict[str, bool]:
        """Probe every replica (`_probe`: free where it can be); a drained one too, so a good
        probe brings it back at once rather than after the cool-down. A healthy replica that
        answered a call well in the last `passive_s` is healthy by that answer (passive health:
        under traffic no probe is sent). A replica whose probe failed while it had calls in
        flight, or ended one well meanwhile, is busy, not down (the probe queued behind the
        calls it serves): it stays, and answers True here. `client`: the checker's own (`run`
        keeps one: a new client builds a TLS context, ~15-30 ms of CPU, every interval)."""
        now = self._clock()
        due = [(k, r) for k, r in self._reg.replicas.items() if not _answered(r, now, passive_s)]
        await self._windows.learn(r.candidate for _, r in due)
        sent = self._clock()
        busy = {key for key, r in due if r.inflight_requests > 0}
        if not due:
            return {}
        if client is None:
            async with httpx.AsyncClient() as own:
                results = await asyncio.gather(*(self._probe(k, r, own) for k, r in due))
        else:
            results = await asyncio.gather(*(self._probe(k, r, client) for k, r in due))
        health: dict[str, bool] = {}
        for (key, r), ok in zip(due, results, strict=True):
            if ok is None:  # no free endpoint and its paid probe is not due: passive only
                health[key] = r.healthy
                continue
            served = r.served_at is not None and r.served_at >= sent
            kept = served or (key in busy and r.inflight_requests > 0)
            if ok:
                if not r.healthy:
                    log.info("replica %s answered its probe: back in service", key)
                r.healthy, r.failures, r.drained_until = True, 0, 0.0
            elif kept:
                log.info("probe of %s failed while it served calls: busy, kept", key)
            elif r.healthy:
                self.drain(key, self._clock(), "its probe failed")
            health[key] = ok or kept
        return health

    async def _probe(self, key: str, r: ReplicaRecord, client: httpx.AsyncClient) -> bool | None:
        """A free probe where the backend has one; else a one-token generation, at most every
        `paid_probe_interval_s` (None: not due, nothing sent)."""
        check = free_health_check(r.candidate.backend)
        if check is not None:
            ok = await free_probe(check, client, self._probe_timeout_s)
            if ok is not None:
                return ok
        now = self._clock()
        last = self._paid_at.get(key)
        if last is not None and now - last < self._paid_probe_interval_s:
            return None
        self._paid_at[key] = now
        self.num_paid_probes += 1
        log.info("replica %s has no free health endpoint: a one-token probe", key)
        return await probe(r.candidate, r.model, self._probe_timeout_s)

    async def run(self, interval_s: float) -> None:
        """Check and sweep forever (start as a task in the lifespan; cancel on shutdown)."""
        async with httpx.AsyncClient() as client:
            while True:
                await self.check(passive_s=interval_s, client=client)
                self.sweep_sessions()
                await asyncio.sleep(interval_s)

    def sweep_sessions(self) -> None:
        reg, now = self._reg, self._clock()
        stale = [s for s, e in reg.sessions.items() if now - e.last_seen > self._session_max_idle_s]
        for s in stale:
            del reg.sessions[s]
        # plans of sessions that never completed; a dispatch racing this falls back to hashes
        reg.planned = {s: v for s, v in reg.planned.items() if s in reg.sessions}


def _answered(r: ReplicaRecord, now: float, within_s: float) -> bool:
    """Healthy and a call ended well within the last `within_s`: no probe needed."""
    return r.healthy and r.served_at is not None and now - r.served_at < within_s
