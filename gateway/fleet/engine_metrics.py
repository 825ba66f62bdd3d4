"""Engine-reported load: one replica's Prometheus `/metrics` text (the bundled engine, vLLM,
SGLang) parsed into an `EngineLoad` sample. Pure: no I/O, no state.

Lenient by design: a line it cannot read is skipped, so one odd series from an engine version
does not blind the fleet; only an answer with no known load metric is `MetricsMalformed`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

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
