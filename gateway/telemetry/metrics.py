"""The Prometheus metrics behind /metrics: Lantern's own and OpenTelemetry's GenAI client metrics,
named as OTel's Prometheus exporter names them. Owns one app instance's registry (no module
globals); never records prompt text.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from adapters.records import slot_init
from adapters.types import Usage
from gateway.telemetry.genai import CHAT, GenAIMetrics
from gateway.telemetry.labels import CallLabels
from gateway.telemetry.series import CounterSeries, HistogramSeries

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@slot_init
@dataclass(frozen=True, slots=True)
class AttemptMetrics:
    """What a finished call attempt tells the metrics: counts and outcome, never text."""

    labels: CallLabels
    status: str
    usage: Usage
    cost_usd: float
    latency_s: float
    ttft_s: float | None
    error_kind: str | None
    trace_id: str | None = None  # hex, when the attempt was traced: the metrics' exemplar
    operation: str = CHAT  # gen_ai.operation.name


class Metrics:
    """Prometheus metrics of one gateway process; other components register on `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = CounterSeries(
            "lantern_requests", "Calls by outcome", ["tenant", "model", "backend", "status"], r
        )
        self.tokens = CounterSeries(
            "lantern_tokens", "Tokens by kind", ["tenant", "model", "kind"], r
        )
        self.cost = CounterSeries("lantern_cost_usd", "Cost in USD", ["tenant", "model"], r)
        self.errors = CounterSeries("lantern_errors", "Errors by kind", ["kind"], r)
        self.ttft = HistogramSeries(
            "lantern_ttft_seconds",
            "Time to first token",
            ["model", "backend"],
            _LATENCY_BUCKETS_S,
            r,
        )
        self.latency = HistogramSeries(
            "lantern_latency_seconds",
            "Whole-call latency",
            ["model", "backend"],
            _LATENCY_BUCKETS_S,
            r,
        )
        self.queue = HistogramSeries(
            "lantern_queue_seconds",
            "Time a call waited in the gateway for a slot on its replica (calls that waited)",
            ["model"],
            _LATENCY_BUCKETS_S,
            r,
        )
        self.inflight = Gauge("lantern_inflight_requests", "Calls in flight", registry=r)
        self.policy_errors = Gauge(
            "lantern_policy_errors", "Tenant policy files currently invalid", registry=r
        )
        self.genai = GenAIMetrics(r)

    def record_attempt(self, a: AttemptMetrics) -> None:
        """Every metric of one finished call attempt."""
        labels = a.labels
        tenant, model, backend = labels.tenant, labels.model, labels.backend
        self.requests.inc((tenant, model, backend, a.status))
        self.observe_usage(labels, a.usage, a.cost_usd)
        self.latency.observe((model, backend), a.latency_s)
        if a.ttft_s is not None:
            self.ttft.observe((model, backend), a.ttft_s)
        if a.error_kind:
            self.errors.inc((a.error_kind,))
        self.genai.record(
            labels, a.usage, a.latency_s, a.ttft_s, a.error_kind, a.trace_id, a.operation
        )

    def observe_queue(self, model: str, waited_s: float) -> None:
        self.queue.observe((model,), waited_s)

    def observe_usage(self, labels: CallLabels, usage: Usage, cost_usd: float) -> None:
        tenant, model = labels.tenant, labels.model
        for kind, n in (
            ("input", usage.input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            if n:
                self.tokens.inc((tenant, model, kind), n)
        if cost_usd:
            self.cost.inc((tenant, model), cost_usd)

    def render(self, openmetrics: bool = False) -> bytes:
        """The text exposition; OpenMetrics (which carries the exemplars) when asked for."""
        return (
            generate_openmetrics(self.registry) if openmetrics else generate_latest(self.registry)
        )
