"""Spans are built only when a processor would receive them: exporter `none` makes none, and a
processor added later (an operator's, a test's) gets one span per call from then on."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters.types import Usage
from gateway.telemetry import CallLabels, CallSpan, Metrics, Telemetry, build_tracer_provider

SPAN = CallSpan("chat.completions", "r1", 0, CallLabels("acme", "m", "b"), Usage(5, 2), "ok", 0.25)


class CountingTracer:
    def __init__(self) -> None:
        self.num_started = 0

    def start_span(self, *args: object, **kw: object) -> object:
        self.num_started += 1
        raise AssertionError("no span may be built without a processor")


def test_no_processor_no_span_built() -> None:
    telemetry = Telemetry(build_tracer_provider("none"), Metrics())
    tracer = CountingTracer()
    telemetry.tracer = tracer  # type: ignore[assignment]
    assert not telemetry.has_span_processors
    telemetry.record_call(SPAN)
    assert tracer.num_started == 0


def test_a_processor_added_later_gets_every_span() -> None:
    provider = TracerProvider()
    telemetry = Telemetry(provider, Metrics())
    telemetry.record_call(SPAN)  # nobody listening yet
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert telemetry.has_span_processors
    telemetry.record_call(SPAN)
    [span] = exporter.get_finished_spans()
    assert span.name == "lantern chat.completions"
    assert span.attributes is not None and span.attributes["gen_ai.usage.input_tokens"] == 5
    assert span.end_time is not None and span.start_time is not None
    assert span.end_time - span.start_time == 250_000_000


def test_console_exporter_counts_as_a_processor() -> None:
    assert Telemetry(build_tracer_provider("console"), Metrics()).has_span_processors
