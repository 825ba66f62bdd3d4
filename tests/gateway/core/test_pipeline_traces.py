"""The pipeline's spans: a fallback is a sibling attempt in the client's trace, each attempt's
context goes to its backend in `traceparent`, streamed and not; nothing traced, no headers; the
prompt and reply text only for a tenant who opted in."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from adapters.errors import ProviderUnavailable
from adapters.types import TextPart
from gateway.core.pipeline import Pipeline
from gateway.telemetry import ClientTrace
from policies.tracing import TracingPolicy
from tests.gateway.core.test_pipeline import FakeBackend, call, pipeline

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT = ClientTrace(f"00-{TRACE_ID}-00f067aa0ba902b7-01")


def traced(pipe: Pipeline) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    pipe.s.telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def sent(backend: FakeBackend) -> str:
    [one] = backend.calls
    assert one.extra_headers is not None
    return one.extra_headers["traceparent"]


def hex_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


@pytest.mark.parametrize("stream", [False, True])
def test_a_fallback_is_a_sibling_attempt_and_each_backend_joins_the_trace(stream: bool) -> None:
    down = FakeBackend("a", ProviderUnavailable("a", "HTTP 503: overloaded", 503))
    up = FakeBackend("b")
    pipe, _ = pipeline(down, up)
    exporter = traced(pipe)

    async def main() -> None:
        adm = await pipe.admit(dataclasses.replace(call(stream=stream), trace=CLIENT))
        if stream:
            async for _ in pipe.stream(adm):
                pass
        else:
            await pipe.complete(adm)

    asyncio.run(main())
    first, second, server = exporter.get_finished_spans()
    assert server.parent is not None and server.parent.span_id == 0x00F067AA0BA902B7
    for attempt, backend in ((first, down), (second, up)):
        assert attempt.parent is not None and attempt.parent.span_id == server.context.span_id
        assert sent(backend) == f"00-{TRACE_ID}-{hex_id(attempt)}-01"
    assert (first.attributes or {})["error.type"] == "ProviderUnavailable"
    assert [(s.attributes or {})["lantern.attempt"] for s in (first, second)] == [0, 1]
    attrs = server.attributes or {}
    assert attrs[ga.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attrs[ga.GEN_AI_RESPONSE_MODEL] == "m"
    assert (ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in attrs) is stream
    assert "error.type" not in attrs


def test_every_backend_down_ends_the_call_span_with_the_last_error() -> None:
    pipe, _ = pipeline(FakeBackend("a", ProviderUnavailable("a", "refused")))
    exporter = traced(pipe)
    adm = asyncio.run(pipe.admit(call()))
    with pytest.raises(ProviderUnavailable):
        asyncio.run(pipe.complete(adm))
    attempt, server = exporter.get_finished_spans()
    assert server.parent is None
    assert (server.attributes or {})["error.type"] == "ProviderUnavailable"


def test_nothing_traced_sends_no_trace_headers() -> None:
    backend = FakeBackend("a")
    pipe, _ = pipeline(backend)
    adm = asyncio.run(pipe.admit(dataclasses.replace(call(), trace=CLIENT)))
    asyncio.run(pipe.complete(adm))
    assert adm.trace is None and backend.calls[0].extra_headers is None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("opted_in", [False, True])
def test_prompt_and_reply_text_only_for_a_tenant_who_opted_in(stream: bool, opted_in: bool) -> None:
    pipe, _ = pipeline(FakeBackend("a"))
    exporter = traced(pipe)
    incoming = call(stream=stream)
    request = dataclasses.replace(incoming.request, system=(TextPart("be brief"),))
    tenant = incoming.tenant.model_copy(update={"tracing": TracingPolicy(record_content=opted_in)})
    incoming = dataclasses.replace(incoming, request=request, tenant=tenant, trace=CLIENT)

    async def main() -> None:
        adm = await pipe.admit(incoming)
        if stream:
            async for _ in pipe.stream(adm):
                pass
        else:
            await pipe.complete(adm)

    asyncio.run(main())
    content = {
        ga.GEN_AI_SYSTEM_INSTRUCTIONS: '[{"type":"text","content":"be brief"}]',
        ga.GEN_AI_INPUT_MESSAGES: (
            '[{"role":"user","parts":[{"type":"text","content":"hello there"}]}]'
        ),
        ga.GEN_AI_OUTPUT_MESSAGES: (
            '[{"role":"assistant","parts":[{"type":"text","content":"hi"}],"finish_reason":"stop"}]'
        ),
    }
    for span in exporter.get_finished_spans():  # the attempt's and the call's
        attrs = span.attributes or {}
        assert {k: attrs[k] for k in content if k in attrs} == (content if opted_in else {})
