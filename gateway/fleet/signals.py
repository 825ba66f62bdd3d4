"""Engine-reported load over time: the HTTP scrape of a replica's `/metrics` (parsed by
`engine_metrics.py`) with a timeout, and the samples held per replica with their age and backoff.

No routing here: the fleet decides how often to scrape and what a sample means.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from gateway.fleet.engine_metrics import (
    EngineLoad,
    MetricsMalformed,
    MetricsUnavailable,
    parse_metrics,
)


class MetricsSource(Protocol):
    """Reads one replica's metrics; raises MetricsError (never anything else) on failure."""

    async def scrape(self, url: str) -> EngineLoad: ...


class HttpMetricsSource:
    """Scrapes over HTTP with one shared client and a hard per-scrape timeout."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        timeout_s: float = 0.5,
        max_bytes: int = 1 << 20,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._clock, self._max_bytes = clock, max_bytes
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._timeout_s = timeout_s

    async def scrape(self, url: str) -> EngineLoad:
        try:
            reply = await self._client.get(url, timeout=self._timeout_s)
        except httpx.HTTPError as exc:
            raise MetricsUnavailable(f"{url}: {type(exc).__name__}") from exc
        if reply.status_code != 200:
            raise MetricsUnavailable(f"{url}: HTTP {reply.status_code}")
        if len(reply.content) > self._max_bytes:
            raise MetricsMalformed(f"{url}: answer over {self._max_bytes} bytes")
        try:
            text = reply.content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetricsMalformed(f"{url}: not UTF-8") from exc
        return parse_metrics(text, self._clock())

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True, slots=True)
class Counts:
    """The fleet's own counts for one replica (dispatches, completions, KV blocks in flight)."""

    dispatched: int = 0
    completed: int = 0
    inflight_blocks: int = 0


@dataclass(frozen=True, slots=True)
class LoadView:
    """An engine sample brought up to now with the router's own traffic since it was taken."""

    queue_depth: int
    kv_free_blocks: int | None
    age_s: float


@dataclass(slots=True)
class _Held:
    load: EngineLoad | None = None
    at: Counts = Counts()  # the fleet's counts when the sample arrived
    failures: int = 0
    next_at: float = 0.0  # no scrape before this (back-off after failures)


class LoadSignals:
    """The last sample per replica, and when to scrape next. A failed scrape keeps the last
    sample (it ages out after `max_age_s`, and the router falls back to its own counts) and
    backs off: interval x 2^failures, at most `max_backoff_s`."""

    def __init__(self, *, interval_s: float, max_age_s: float, max_backoff_s: float = 60.0):
        self.interval_s, self.max_age_s, self.max_backoff_s = interval_s, max_age_s, max_backoff_s
        self._held: dict[str, _Held] = {}

    def is_due(self, key: str, now: float) -> bool:
        held = self._held.get(key)
        return held is None or now >= held.next_at

    def observe(self, key: str, load: EngineLoad, counts: Counts) -> None:
        held = self._held.setdefault(key, _Held())
        held.load, held.at, held.failures = load, counts, 0
        held.next_at = load.sampled_at + self.interval_s

    def failed(self, key: str, now: float) -> int:
        """Record a failed scrape; returns the consecutive failures."""
        held = self._held.setdefault(key, _Held())
        held.failures += 1
        held.next_at = now + min(self.interval_s * 2**held.failures, self.max_backoff_s)
        return held.failures

    def forget(self, key: str) -> None:
        self._held.pop(key, None)

    def last(self, key: str) -> EngineLoad | None:
        held = self._held.get(key)
        return held.load if held is not None else None

    def view(self, key: str, now: float, counts: Counts, capacity_blocks: int) -> LoadView | None:
        """None without a sample younger than max_age_s. Waiting requests the engine reported
        grow by our dispatches and shrink by our completions since; free KV moves with the
        blocks we dispatched or released since."""
        held = self._held.get(key)
        load = held.load if held is not None else None
        if held is None or load is None or now - load.sampled_at > self.max_age_s:
            return None
        waiting = load.waiting or 0
        if waiting:
            moved = (counts.dispatched - held.at.dispatched) - (
                counts.completed - held.at.completed
            )
            waiting = max(waiting + moved, 0)
        free = None
        if load.kv_usage is not None:
            used = (
                load.kv_usage * capacity_blocks + counts.inflight_blocks - held.at.inflight_blocks
            )
            free = max(int(capacity_blocks - used), 0)
        return LoadView(waiting, free, now - load.sampled_at)
