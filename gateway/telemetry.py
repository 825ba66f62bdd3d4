"""Request telemetry: one OpenTelemetry span per call and the Prometheus metrics behind /metrics.

Owns the metric registry of one app instance (no module globals); never records prompt text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

from adapters.types import Usage

Exporter = Literal["none", "console", "otlp"]
_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(frozen=True, slots=True)
class CallLabels:
    tenant: str
    model: str
    backend: str


@dataclass(frozen=True, slots=True)
class CallSpan:
    """What a finished call attempt tells the tracer: counts and outcome, never text."""

    route: str
    request_id: str
    attempt: int
    labels: CallLabels
    usage: Usage
    status: str
    latency_s: float


# Kept over prometheus-client's own child dict: its labels() validates and locks, ~8-11 µs a
# lookup against ~2.5 µs here, up to ten a call.
class LabelChildren:
    """`metric.labels(*values)`, memoised by (metric, label values): `labels()` costs ~10 us a
    lookup, and a call records up to ten. The set is bounded by tenants x models x backends x
    outcomes; nothing here removes a label set (a removed one would stay memoised)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def __call__(self, metric: MetricWrapperBase, *values: str) -> Any:
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found


class Metrics:
    """Prometheus metrics of one gateway process; other components register on `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "lantern_requests",
            "Calls by outcome",
            ["tenant", "model", "backend", "status"],
            registry=r,
        )
        self.tokens = Counter(
            "lantern_tokens", "Tokens by kind", ["tenant", "model", "kind"], registry=r
        )
        self.cost = Counter("lantern_cost_usd", "Cost in USD", ["tenant", "model"], registry=r)
        self.errors = Counter("lantern_errors", "Errors by kind", ["kind"], registry=r)
        self.ttft = Histogram(
            "lantern_ttft_seconds",
            "Time to first token",
            ["model", "backend"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.latency = Histogram(
            "lantern_latency_seconds",
            "Whole-call latency",
            ["model", "backend"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.queue = Histogram(
            "lantern_queue_seconds",
            "Time a call waited in the gateway for a slot on its replica (calls that waited)",
            ["model"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.inflight = Gauge("lantern_inflight_requests", "Calls in flight", registry=r)
        self.policy_errors = Gauge(
            "lantern_policy_errors", "Tenant policy files currently invalid", registry=r
        )
        self.child = LabelChildren()

    def record_attempt(
        self,
        labels: CallLabels,
        status: str,
        usage: Usage,
        cost_usd: float,
        latency_s: float,
        ttft_s: float | None,
        error_kind: str | None,
    ) -> None:
        """Every metric of one finished call attempt."""
        self.child(self.requests, labels.tenant, labels.model, labels.backend, status).inc()
        self.observe_usage(labels, usage, cost_usd)
        self.child(self.latency, labels.model, labels.backend).observe(latency_s)
        if ttft_s is not None:
            self.child(self.ttft, labels.model, labels.backend).observe(ttft_s)
        if error_kind:
            self.child(self.errors, error_kind).inc()

    def observe_queue(self, model: str, waited_s: float) -> None:
        self.child(self.queue, model).observe(waited_s)

    def observe_usage(self, labels: CallLabels, usage: Usage, cost_usd: float) -> None:
        for kind, n in (
            ("input", usage.input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            if n:
                self.child(self.tokens, labels.tenant, labels.model, kind).inc(n)
        if cost_usd:
            self.child(self.cost, labels.tenant, labels.model).inc(cost_usd)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def build_tracer_provider(exporter: Exporter, otlp_endpoint: str | None = None) -> TracerProvider:
    provider = TracerProvider()
    span_exporter: SpanExporter | None = None
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = (
            OTLPSpanExporter(endpoint=otlp_endpoint) if otlp_endpoint else OTLPSpanExporter()
        )
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider


class Telemetry:
    """Spans and metrics together, so the pipeline makes one call per event."""

    def __init__(self, provider: TracerProvider, metrics: Metrics) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("lantern.gateway")
        self.metrics = metrics

    @property
    def has_span_processors(self) -> bool:
        """False while nothing would receive a span (exporter `none` and no processor added
        since): then `record_call` makes none. An SDK that hides its processors counts as True."""
        active = getattr(self.provider, "_active_span_processor", None)
        processors = getattr(active, "_span_processors", None)
        return processors is None or len(processors) > 0

    def record_call(self, span: CallSpan) -> None:
        """One span per call attempt, written when it ends (streams and fallbacks included);
        none while no processor would receive it (a span costs ~0.05 ms to build)."""
        if not self.has_span_processors:
            return
        end_ns = time.time_ns()
        otel = self.tracer.start_span(
            f"lantern {span.route}",
            start_time=end_ns - int(span.latency_s * 1e9),
            attributes={
                "lantern.tenant": span.labels.tenant,
                "gen_ai.request.model": span.labels.model,
                "lantern.backend": span.labels.backend,
                "lantern.attempt": span.attempt,
                "lantern.request_id": span.request_id,
                "gen_ai.usage.input_tokens": span.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": span.usage.output_tokens,
                "lantern.usage.uncached_input_tokens": span.usage.input_tokens,
                "lantern.usage.cache_read_tokens": span.usage.cache_read_tokens,
                "lantern.usage.cache_write_tokens": span.usage.cache_write_tokens,
                "lantern.status": span.status,
            },
        )
        if span.status != "ok":
            otel.set_status(Status(StatusCode.ERROR, span.status))
        otel.end(end_time=end_ns)

    def shutdown(self) -> None:
        self.provider.shutdown()
