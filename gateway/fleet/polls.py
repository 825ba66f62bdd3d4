"""Engine-reported load, scraped off the request path: which replicas are due a scrape, the
polling loop, and what one sample changes (the signals, and the index's KV size when reported).
No routing and no parsing here (`fleet_signals.py` parses, `fleet_probe.py` scrapes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.fleet.engine_metrics import EngineLoad, metrics_url
from gateway.fleet.probe import scrape_due
from gateway.fleet.registry import FleetRegistry
from gateway.fleet.signals import LoadSignals, MetricsSource
from gateway.fleet.state import ReplicaRecord

log = logging.getLogger("lantern.fleet")


class SignalPolls:
    def __init__(
        self,
        registry: FleetRegistry,
        signals: LoadSignals,
        metrics: MetricsSource | None,
        *,
        clock: Callable[[], float],
        block_tokens: int,
        timeout_s: float,
    ) -> None:
        self._reg, self._signals, self._metrics = registry, signals, metrics
        self._clock, self._block_tokens, self._timeout_s = clock, block_tokens, timeout_s

    def observe(self, key: str, load: EngineLoad) -> None:
        """One engine sample for one replica; a reported KV size replaces the configured one."""
        r = self._reg.replicas.get(key)
        if r is None:
            return
        if load.kv_capacity_tokens:
            self._reg.index.resize(key, max(load.kv_capacity_tokens // self._block_tokens, 1))
        if load.waiting and load.running:  # a full batch: the most seen is its capacity
            r.engine_max_in_flight = max(r.engine_max_in_flight or 0, load.running)
        self._signals.observe(key, load, r.counts())

    async def poll(self) -> dict[str, bool]:
        """Scrape every due replica's metrics once (`scrape_due`); True where a sample arrived."""
        source, now = self._metrics, self._clock()
        if source is None:  # no replica has a metrics URL
            return {}
        due = [
            (key, url)
            for key, r in self._reg.replicas.items()
            if (url := self._metrics_url(r)) is not None
            and now >= r.drained_until
            and self._signals.is_due(key, now)
        ]
        return await scrape_due(
            source, due, self._timeout_s, self._signals, self.observe, self._clock
        )

    def _metrics_url(self, r: ReplicaRecord) -> str | None:
        path, base = r.spec.metrics_path, r.candidate.replica
        if self._metrics is None or path is None or base is None:
            return None
        return metrics_url(base, path)

    async def run(self) -> None:
        """Scrape forever at the signal interval (a task in the lifespan; cancel on shutdown)."""
        while True:
            try:
                await self.poll()
            except Exception:  # a bug here must not stop the polls; the router falls back
                log.exception("engine load poll failed")
            await asyncio.sleep(self._signals.interval_s)
