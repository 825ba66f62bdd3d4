"""Request telemetry: one OpenTelemetry span per call and the Prometheus metrics behind /metrics.

Owns the metric registry of one app instance (no module globals); never records prompt text.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from opentelemetry.sdk.trace import Span, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from adapters.types import Usage

Exporter = Literal["none", "console", "otlp"]
_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(frozen=True, slots=True)
class CallLabels:
    tenant: str
    model: str
    backend: str


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
        self.inflight = Gauge("lantern_inflight_requests", "Calls in flight", registry=r)
        self.policy_errors = Gauge(
            "lantern_policy_errors", "Tenant policy files currently invalid", registry=r
        )

    def observe_usage(self, labels: CallLabels, usage: Usage, cost_usd: float) -> None:
        for kind, n in (
            ("input", usage.input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            if n:
                self.tokens.labels(labels.tenant, labels.model, kind).inc(n)
        if cost_usd:
            self.cost.labels(labels.tenant, labels.model).inc(cost_usd)

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

    @contextmanager
    def call_span(self, route: str, tenant: str, model: str) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            f"lantern {route}", attributes={"lantern.tenant": tenant, "gen_ai.request.model": model}
        ) as span:
            yield span  # type: ignore[misc]

    @staticmethod
    def annotate(span: Span, backend: str, usage: Usage, status: str) -> None:
        span.set_attribute("lantern.backend", backend)
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        span.set_attribute("lantern.usage.cache_read_tokens", usage.cache_read_tokens)
        span.set_attribute("lantern.usage.cache_write_tokens", usage.cache_write_tokens)
        span.set_attribute("lantern.status", status)
        if status != "ok":
            span.set_status(Status(StatusCode.ERROR, status))

    def shutdown(self) -> None:
        self.provider.shutdown()
