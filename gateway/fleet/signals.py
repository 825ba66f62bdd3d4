"""Engine-reported load: one replica's Prometheus `/metrics` text (the bundled engine, vLLM,
SGLang) parsed into an `EngineLoad` sample, and the HTTP scrape with a timeout behind it.

No routing and no state here: the fleet decides how often to scrape and what a sample means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from gateway.errors import GatewayError

# metric names per quantity, in the order tried; every engine spells them differently
_WAITING = ("selfhost_num_requests_waiting", "vllm:num_requests_waiting", "sglang:num_queue_reqs")
_RUNNING = ("selfhost_num_requests_running", "vllm:num_requests_running", "sglang:num_running_reqs")
_KV_USAGE = (
    "selfhost_kv_cache_usage_perc",
    "vllm:kv_cache_usage_perc",  # vLLM v1
    "vllm:gpu_cache_usage_perc",  # vLLM v0
    "sglang:token_usage",
)
# KV size: (name, tokens per unit); the bundled engine counts 16-token blocks (fixed in its CLI)
_KV_SIZE = (("selfhost_kv_cache_total_blocks", 16), ("sglang:max_total_num_tokens", 1))
_VLLM_CACHE_INFO = "vllm:cache_config_info"  # labels num_gpu_blocks and block_size

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(GatewayError):
    """A replica's metrics could not be read or understood (the fleet keeps its last sample)."""


class MetricsUnavailable(MetricsError):
    """No answer: connection refused, timeout, or a non-200 status."""


class MetricsMalformed(MetricsError):
    """An answer, but not Prometheus text with any load metric we know."""


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of one replica. Counts are summed over label sets (data-parallel engines),
    the usage fraction averaged; None where the engine does not report the quantity."""

    sampled_at: float  # the fleet's clock when the answer arrived
    waiting: int | None = None  # requests queued for admission (KV space or batch slots)
    running: int | None = None
    kv_usage: float | None = None  # fraction of KV held by live requests, 0..1
    kv_capacity_tokens: int | None = None  # total KV size, when the engine says it


@dataclass(frozen=True, slots=True)
class _Series:
    name: str
    labels: Mapping[str, str]
    value: float


def _series(text: str) -> list[_Series]:
    out: list[_Series] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            labels = dict(_LABEL.findall(m.group(2) or ""))
            out.append(_Series(m.group(1), labels, value))
    return out


def _first(by_name: Mapping[str, list[float]], names: tuple[str, ...]) -> list[float] | None:
    return next((by_name[n] for n in names if n in by_name), None)


def _capacity_tokens(by_name: Mapping[str, list[float]], series: list[_Series]) -> int | None:
    for name, unit in _KV_SIZE:
        if name in by_name:
            return int(sum(by_name[name])) * unit
    return _vllm_capacity(series)


def _vllm_capacity(series: list[_Series]) -> int | None:
    total = 0
    for s in series:
        if s.name == _VLLM_CACHE_INFO:
            try:
                total += int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"])
            except (KeyError, ValueError):
                continue
    return total or None


def parse_metrics(text: str, sampled_at: float) -> EngineLoad:
    """The load quantities in one Prometheus text exposition; MetricsMalformed if it has none."""
    series = _series(text)
    by_name: dict[str, list[float]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s.value)
    waiting, running = _first(by_name, _WAITING), _first(by_name, _RUNNING)
    usage, capacity = _first(by_name, _KV_USAGE), _capacity_tokens(by_name, series)
    if waiting is None and running is None and usage is None and capacity is None:
        raise MetricsMalformed("no known load metric in the answer")
    return EngineLoad(
        sampled_at,
        int(sum(waiting)) if waiting is not None else None,
        int(sum(running)) if running is not None else None,
        min(max(sum(usage) / len(usage), 0.0), 1.0) if usage else None,
        capacity if capacity and capacity > 0 else None,
    )


def metrics_url(base_url: str, path: str = "/metrics") -> str:
    """The metrics address of an OpenAI-compatible replica: its server root (the base URL
    without a trailing `/v1`) plus `path`."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/" + path.lstrip("/")


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
