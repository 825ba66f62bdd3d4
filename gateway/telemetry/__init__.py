"""Request telemetry: OpenTelemetry spans in the GenAI conventions (only while an exporter or
processor would receive them) and the Prometheus metrics behind /metrics.

Owns the tracer provider and metric registry of one app instance (no module globals).
"""

from __future__ import annotations

import time
from typing import Literal

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

from gateway.telemetry.labels import CallLabels, LabelChildren
from gateway.telemetry.metrics import AttemptMetrics, Metrics
from gateway.telemetry.operations import Operation, OperationTrace
from gateway.telemetry.tools import ToolFacts, ToolTrace
from gateway.telemetry.traces import AttemptFacts, CallFacts, CallTrace, ClientTrace, Ending

__all__ = [
    "AttemptFacts",
    "AttemptMetrics",
    "CallFacts",
    "CallLabels",
    "CallTrace",
    "ClientTrace",
    "Ending",
    "LabelChildren",
    "Metrics",
    "Operation",
    "OperationTrace",
    "Telemetry",
    "ToolFacts",
    "ToolTrace",
    "build_tracer_provider",
]

Exporter = Literal["none", "console", "otlp"]


def build_tracer_provider(
    exporter: Exporter, otlp_endpoint: str | None = None, service_name: str = "lantern"
) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    if exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = (
            OTLPSpanExporter(endpoint=otlp_endpoint) if otlp_endpoint else OTLPSpanExporter()
        )
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider


def _has_processors(provider: TracerProvider) -> bool:
    """False while nothing would receive a span; an SDK that hides its processors: True."""
    active = getattr(provider, "_active_span_processor", None)
    processors = getattr(active, "_span_processors", None)
    return processors is None or len(processors) > 0


class Telemetry:
    """Spans and metrics together, so the pipeline makes one call per event."""

    def __init__(self, provider: TracerProvider, metrics: Metrics) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("lantern.gateway")
        self.metrics = metrics
        # a plain attribute, read on every call: with exporter `none` no span object, no
        # attribute dict and no header read is made
        self.is_tracing = _has_processors(provider)

    def add_span_processor(self, processor: SpanProcessor) -> None:
        """A processor added after start (an operator's, a test's): every call from now on is
        traced."""
        self.provider.add_span_processor(processor)
        self.is_tracing = True

    def trace_call(
        self, facts: CallFacts, client: ClientTrace | None, elapsed_s: float
    ) -> CallTrace:
        """The call's server span, begun `elapsed_s` ago (when the call arrived)."""
        return CallTrace(self.tracer, facts, client, time.time_ns() - int(elapsed_s * 1e9))

    def trace_tool(
        self, facts: ToolFacts, client: ClientTrace | None, start_ns: int | None = None
    ) -> ToolTrace:
        """The `execute_tool` span of one tool run or MCP tool call, begun at `start_ns`
        (wall clock, ns; now when None)."""
        return ToolTrace(self.tracer, facts, client, start_ns or time.time_ns())

    def trace_operation(self, tenant: str, door: str, client: ClientTrace | None) -> OperationTrace:
        """The span of a door call that runs no inference (`count_tokens`, a stored response's
        read or deletion, `tools/list`), begun now and made when it ends."""
        return OperationTrace(self.tracer, tenant, door, client, time.time_ns())

    def shutdown(self) -> None:
        self.provider.shutdown()
