"""Counters and histograms kept as plain per-label-set accumulators and turned into Prometheus
samples only at scrape time, the same samples prometheus_client's `Counter` and `Histogram`
give. Recorded on the event loop's thread; never holds text beyond label values.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


def _is_created_shown() -> bool:
    """prometheus_client's switch for `_created` samples (PROMETHEUS_DISABLE_CREATED_SERIES)."""
    return bool(getattr(prometheus_metrics, "_use_created", True))


class _Series(Collector):
    """One metric family: its name, help, type and label names, registered on `registry`.

    A label set's accumulator lives as long as the family, as a prometheus_client child does:
    the sets are bounded by tenants x models x backends x outcomes, as the callers choose them.
    """

    typ = ""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self.name = name.removesuffix("_total") if self.typ == "counter" else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        registry.register(self)

    def describe(self) -> Iterable[Metric]:
        return [Metric(self.name, self.documentation, self.typ)]


class CounterSeries(_Series):
    """A counter by label set: [value, created] per set."""

    typ = "counter"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self._values: dict[Labels, list[float]] = {}
        super().__init__(name, documentation, labelnames, registry)

    def inc(self, labels: Labels, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        found = self._values.get(labels)
        if found is None:
            found = self._values[labels] = [0.0, time.time()]
        found[0] += amount

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, self.typ)
        is_created = _is_created_shown()
        total, created = self.name + "_total", self.name + "_created"
        for labels, (value, created_s) in list(self._values.items()):
            named = dict(zip(self.labelnames, labels, strict=True))
            metric.add_sample(total, named, value)
            if is_created:
                metric.add_sample(created, named, created_s)
        return [metric]


class GaugeSeries(_Series):
    """A gauge by label set: the last value set for each (no lock, no call per set: it is
    set on every call's path)."""

    typ = "gauge"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self._values: dict[Labels, float] = {}
        super().__init__(name, documentation, labelnames, registry)

    def set(self, labels: Labels, value: float) -> None:
        self._values[labels] = value

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, self.typ)
        for labels, value in list(self._values.items()):
            metric.add_sample(self.name, dict(zip(self.labelnames, labels, strict=True)), value)
        return [metric]


class _Observed:
    """One label set of a histogram: its per-bucket counts (not cumulative), sum and latest
    exemplar per bucket."""

    __slots__ = ("counts", "created", "exemplars", "sum")

    def __init__(self, num_buckets: int, created: float) -> None:
        self.counts = [0] * num_buckets
        self.sum = 0.0
        self.created = created
        self.exemplars: list[Exemplar | None] = [None] * num_buckets


class HistogramSeries(_Series):
    """A histogram by label set, with a trace exemplar on the bucket an observation fell in."""

    typ = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        self._les = tuple(floatToGoString(b) for b in bounds)
        self._observed: dict[Labels, _Observed] = {}
        super().__init__(name, documentation, labelnames, registry)

    def observe(
        self, labels: Labels, amount: float, exemplar: dict[str, str] | None = None
    ) -> None:
        found = self._observed.get(labels)
        if found is None:
            found = self._observed[labels] = _Observed(len(self._bounds), time.time())
        found.sum += amount
        i = bisect_left(self._bounds, amount)
        if amount <= self._bounds[i]:  # NaN falls in no bucket, as in prometheus_client
            found.counts[i] += 1
            if exemplar:
                found.exemplars[i] = Exemplar(exemplar, amount, time.time())

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.name, self.documentation, self.typ)
        is_created = _is_created_shown()
        name = self.name
        for labels, observed in list(self._observed.items()):
            named = dict(zip(self.labelnames, labels, strict=True))
            counts, exemplars = observed.counts[:], observed.exemplars[:]
            acc = 0.0
            for le, count, exemplar in zip(self._les, counts, exemplars, strict=True):
                acc += count
                metric.add_sample(f"{name}_bucket", {**named, "le": le}, acc, None, exemplar)
            metric.add_sample(f"{name}_count", named, acc)
            if self._bounds[0] >= 0:
                metric.add_sample(f"{name}_sum", named, observed.sum)
            if is_created:
                metric.add_sample(f"{name}_created", named, observed.created)
        return [metric]
