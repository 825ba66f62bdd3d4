"""Spans are built only when a processor would receive them: exporter `none` makes none, and a
processor added later (an operator's, a test's) gets the spans of every call from then on."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from adapters.types import Usage
from gateway.telemetry import (
    AttemptFacts,
    CallFacts,
    ClientTrace,
    Ending,
    Metrics,
    Telemetry,
    ToolFacts,
    build_tracer_provider,
)

FACTS = CallFacts("gpt-4o-mini", "acme", "r1", "s1", "chat.completions", True, 64, "hit")
PARENT = ClientTrace("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")


def test_exporter_none_traces_nothing() -> None:
    assert not Telemetry(build_tracer_provider("none"), Metrics()).is_tracing


def test_console_exporter_counts_as_a_processor() -> None:
    assert Telemetry(build_tracer_provider("console"), Metrics()).is_tracing


def test_a_processor_added_later_turns_tracing_on() -> None:
    telemetry = Telemetry(TracerProvider(), Metrics())
    assert not telemetry.is_tracing
    telemetry.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    assert telemetry.is_tracing


def test_server_span_descends_from_the_client_and_attempts_from_it() -> None:
    telemetry, exporter = Telemetry(TracerProvider(), Metrics()), InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    trace = telemetry.trace_call(FACTS, PARENT, 0.5)
    headers = trace.begin_attempt(AttemptFacts(0, "openai", "b", "cloud", None), 10**18)
    usage = Usage(input_tokens=5, output_tokens=2, cache_read_tokens=90, cache_write_tokens=3)
    end = Ending("ok", None, usage, 0.0125, 0.25, 0.05, "gpt-4o-mini-2024", "stop")
    trace.end_attempt(0, end)
    trace.end(end)
    attempt, server = exporter.get_finished_spans()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    assert format(server.context.trace_id, "032x") == trace_id
    assert server.parent is not None and server.parent.span_id == 0xB7AD6B7169203331
    assert attempt.parent is not None and attempt.parent.span_id == server.context.span_id
    span_id = format(attempt.context.span_id, "016x")
    assert headers == {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "k=v"}
    assert attempt.end_time - attempt.start_time == 250_000_000
    assert server.name == attempt.name == "chat gpt-4o-mini"
    attrs = dict(server.attributes or {})
    assert attrs[ga.GEN_AI_OPERATION_NAME] == "chat"
    assert attrs[ga.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[ga.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert attrs[ga.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024"
    assert attrs[ga.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attrs[ga.GEN_AI_USAGE_INPUT_TOKENS] == 98
    assert attrs[ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 90
    assert attrs[ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 3
    assert attrs[ga.GEN_AI_CONVERSATION_ID] == "s1"
    assert attrs[ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == 0.05
    assert attrs["lantern.cost_usd"] == 0.0125


def test_a_failed_call_says_its_error_type() -> None:
    telemetry, exporter = Telemetry(TracerProvider(), Metrics()), InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    trace = telemetry.trace_call(FACTS, None, 0.0)
    trace.begin_attempt(AttemptFacts(0, "openai", "b", "cloud", None), 10**18)
    trace.end(Ending("error", "ProviderTimeout", Usage(), 0.0, 1.0))
    attempt, server = exporter.get_finished_spans()
    assert server.parent is None  # no client context: a new trace
    for span in (attempt, server):
        assert (span.attributes or {})["error.type"] == "ProviderTimeout"
        assert not span.status.is_ok


def test_every_span_of_a_call_names_its_tenant() -> None:
    """The upstream attempts' client spans too: a query for one tenant's spans finds the calls
    its traffic made upstream, never a neighbour's."""
    telemetry, exporter = Telemetry(TracerProvider(), Metrics()), InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    call = telemetry.trace_call(FACTS, None, 0.0)
    call.begin_attempt(AttemptFacts(0, "openai", "b", "cloud", None), 10**18)
    call.end(Ending("ok", None, Usage(), 0.0, 1.0))
    tool = telemetry.trace_tool(ToolFacts("orders__lookup", "zeta", "mcp"), None)
    tool.begin_upstream("orders", "lookup")
    tool.end("ok")
    spans = exporter.get_finished_spans()
    assert [(s.name, s.kind.name) for s in spans] == [
        ("chat gpt-4o-mini", "CLIENT"),
        ("chat gpt-4o-mini", "SERVER"),
        ("tools/call lookup", "CLIENT"),
        ("execute_tool orders__lookup", "SERVER"),
    ]
    tenants = [(s.attributes or {}).get("lantern.tenant") for s in spans]
    assert tenants == ["acme", "acme", "zeta", "zeta"]


def test_what_a_call_does_not_have_is_left_out_not_empty() -> None:
    """No session, no ledger row yet, no cache diagnosis: no `gen_ai.conversation.id` (an empty
    one would make every sessionless call one conversation), no empty Lantern attributes."""
    telemetry, exporter = Telemetry(TracerProvider(), Metrics()), InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    facts = CallFacts(
        "text-embedding-3-small", "acme", "", "", "embeddings", None, None, "", "embeddings"
    )
    call = telemetry.trace_call(facts, None, 0.0)
    call.begin_attempt(AttemptFacts(0, "openai", "b", "cloud", None), 10**18)
    call.end(Ending("ok", None, Usage(), 0.0, 1.0))
    for span in exporter.get_finished_spans():
        attrs = dict(span.attributes or {})
        assert ga.GEN_AI_CONVERSATION_ID not in attrs
        assert "" not in attrs.values()
        assert attrs["lantern.tenant"] == "acme"
