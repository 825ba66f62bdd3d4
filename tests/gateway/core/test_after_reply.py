"""Bookkeeping after the reply: every attempt still gets exactly one ledger row, metrics and a
span, and exactly one settle, also on client disconnects and upstream errors; the deferred path
records the same rows as the reference path (bookkeeping before the reply)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adapters.backend import BackendCall
from adapters.errors import ProviderUnavailable
from adapters.types import (
    ChatRequest,
    ChatResponse,
    Message,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
)
from gateway.core.after_reply import AfterReply
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.ports import (
    Attempt,
    CacheVerdict,
    CallRecord,
    Candidate,
    ModelRoute,
    PreparedPrompt,
    RoutePlan,
)
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy

USAGE = Usage(input_tokens=7, output_tokens=3)


def test_work_runs_on_the_next_loop_turn_exactly_once() -> None:
    async def main() -> list[str]:
        after, done = AfterReply(), []
        after.add(done.append, "a")
        after.add(done.append, "b")
        assert done == [] and after.num_pending == 2  # nothing ran inside the caller's step
        await asyncio.sleep(0)
        after.flush()  # nothing left: a second flush runs nothing twice
        return done

    assert asyncio.run(main()) == ["a", "b"]


def test_a_failing_piece_does_not_drop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    after, done = AfterReply(), []
    after.add(lambda: 1 / 0)  # no running loop: runs at once
    after.add(done.append, "kept")
    assert done == ["kept"] and "after-reply bookkeeping failed" in caplog.text


def test_immediate_runs_inside_add() -> None:
    async def main() -> list[str]:
        after, done = AfterReply(immediate=True), []
        after.add(done.append, "now")
        return list(done)

    assert asyncio.run(main()) == ["now"]


class Backend:
    name, kind, wire = "fake", "openai_compatible", None

    def __init__(self, fail_after_output: bool = False, hang: bool = False) -> None:
        self.fail_after_output = fail_after_output
        self.hang = hang

    async def complete(self, call: BackendCall) -> ChatResponse:
        if self.hang:
            await asyncio.sleep(3600)
        return ChatResponse("r1", "m", (TextPart("hi there you"),), "stop", USAGE)

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        yield StreamStart("r1", "m")
        yield TextDelta(0, "hi")
        if self.fail_after_output:
            raise ProviderUnavailable("fake", "connection reset")
        if self.hang:
            await asyncio.sleep(3600)
        yield StreamEnd("stop", USAGE)

    async def aclose(self) -> None:
        return None


class Fakes:
    """The pipeline's ports, counting what reaches them."""

    def __init__(self, backend: Backend) -> None:
        self.route = ModelRoute("m", (Candidate(backend, "fake", "api"),))  # type: ignore[arg-type]
        self.rows: list[CallRecord] = []
        self.settled: list[Usage] = []
        self.completed: list[bool] = []
        self.reconciled = 0

    # models, counter, pricing
    def get(self, name: str) -> ModelRoute | None:
        return self.route if name == "m" else None

    def names(self) -> list[str]:
        return ["m"]

    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        return 7

    def count_text(self, model: str, text: str, scope: str = "") -> int:
        return len(text.split())

    def cost_usd(self, model: str, usage: Usage) -> float:
        return usage.input_tokens * 1e-6 + usage.output_tokens * 2e-6

    def uncached_cost_usd(self, model: str, usage: Usage) -> float:
        return self.cost_usd(model, usage)

    def worst_case_usd(self, model: str, prompt: int, max_output: int, write_ttl: str) -> float:
        return self.cost_usd(model, Usage(prompt, max_output))

    # admission
    async def reserve(self, tenant, **kw):  # type: ignore[no-untyped-def]
        return object()

    async def settle(self, ticket: object, *, usage: Usage, cost_usd: float) -> None:
        self.settled.append(usage)

    def rate_headers(self, ticket: object) -> dict[str, str]:
        return {}

    # prompts
    def ready(self, tenant: str) -> None:
        return None

    def prepare(self, wire, body, request, tenant, model) -> PreparedPrompt:  # type: ignore[no-untyped-def]
        return PreparedPrompt(body=body, request=request, session_root="root", cache_salt="s")

    def observe(self, tenant, session_id, prepared) -> CacheVerdict:  # type: ignore[no-untyped-def]
        return CacheVerdict("first_call", '{"reason":"first_call"}')

    def reconcile(self, verdict: CacheVerdict, usage: Usage) -> None:
        self.reconciled += 1

    # routing
    async def recall(self, tenant: str, session_id: str) -> None:
        return None

    def plan(self, route, tenant, session_id, prepared, prompt_tokens, max_tokens) -> RoutePlan:  # type: ignore[no-untyped-def]
        return RoutePlan((Attempt(route.candidates[0], "only"),))

    def queue(self, plan, tenant) -> None:  # type: ignore[no-untyped-def]
        return None

    def release(self, plan) -> None:  # type: ignore[no-untyped-def]
        return None

    def on_dispatch(self, attempt, session_id, prepared) -> None:  # type: ignore[no-untyped-def]
        return None

    def on_first_token(self, attempt: Attempt) -> None:
        return None

    def on_complete(self, attempt: Attempt, usage: Usage, ok: bool, fault: str = "backend") -> None:
        self.completed.append(ok)

    def context_window(self, route, tenant) -> int | None:  # type: ignore[no-untyped-def]
        return None

    # ledger
    def record(self, row: CallRecord) -> None:
        self.rows.append(row)


def build(backend: Backend, *, defer: bool = True) -> tuple[Pipeline, Fakes, InMemorySpanExporter]:
    fakes, spans = Fakes(backend), InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    services = PipelineParts(
        fakes, fakes, fakes, fakes, fakes, fakes, fakes, Telemetry(provider, Metrics())
    )
    pipeline = Pipeline(dataclasses.replace(services, clock=lambda: 5.0, defer_bookkeeping=defer))
    return pipeline, fakes, spans


def incoming(stream: bool = False) -> IncomingCall:
    request = ChatRequest(
        model="m", max_tokens=8, stream=stream, messages=(Message("user", (TextPart("hi"),)),)
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return IncomingCall("openai", TenantPolicy(tenant="acme"), "k1", request, body, "s1")


def test_the_settle_and_the_row_come_before_the_reply_and_the_telemetry_after_it() -> None:
    async def main() -> tuple[int, int, int, Fakes, InMemorySpanExporter]:
        pipeline, fakes, spans = build(Backend())
        await pipeline.complete(await pipeline.admit(incoming()))
        at_reply = (len(fakes.settled), len(fakes.rows), len(spans.get_finished_spans()))
        await asyncio.sleep(0)
        return (*at_reply, fakes, spans)

    settled, rows, num_spans, fakes, spans = asyncio.run(main())
    # the row is in the ledger (its durable spool) before the reply completes; the span waits
    assert (settled, rows, num_spans) == (1, 1, 0)
    assert [(r.status, r.usage, r.cost_usd) for r in fakes.rows] == [("ok", USAGE, 7e-6 + 6e-6)]
    assert fakes.completed == [True] and fakes.reconciled == 1
    assert [s.name for s in spans.get_finished_spans()] == ["chat m", "chat m"]  # attempt, call


def test_client_disconnect_mid_call_settles_and_records_once() -> None:
    async def main() -> Fakes:
        pipeline, fakes, _ = build(Backend(hang=True))
        admitted = await pipeline.admit(incoming())
        task = asyncio.create_task(pipeline.complete(admitted))
        await asyncio.sleep(0.01)
        task.cancel()  # what the server does when the client goes away
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        return fakes

    fakes = asyncio.run(main())
    assert fakes.settled == [Usage(input_tokens=7)]
    assert [(r.status, r.usage) for r in fakes.rows] == [("client_disconnect", Usage(7))]


def test_stream_broken_after_output_and_disconnect_mid_stream() -> None:
    async def consume(pipeline: Pipeline, stop_after: int | None) -> None:
        events = pipeline.stream(await pipeline.admit(incoming(stream=True)))
        seen = 0
        try:
            async for _ in events:
                seen += 1
                if seen == stop_after:
                    break
        finally:
            await events.aclose()  # the front door closes the generator on disconnect

    async def main() -> tuple[Fakes, Fakes]:
        broken, fakes_broken, _ = build(Backend(fail_after_output=True))
        with pytest.raises(ProviderUnavailable):
            await consume(broken, None)
        gone, fakes_gone, _ = build(Backend(hang=True))
        await consume(gone, 2)
        await asyncio.sleep(0)
        return fakes_broken, fakes_gone

    broken, gone = asyncio.run(main())
    for fakes, status in ((broken, "error"), (gone, "client_disconnect")):
        assert fakes.settled == [Usage(input_tokens=7, output_tokens=1)]
        assert [(r.status, r.usage) for r in fakes.rows] == [(status, fakes.settled[0])]


def test_deferred_rows_equal_the_reference_path() -> None:
    async def rows(defer: bool) -> list[CallRecord]:
        pipeline, fakes, _ = build(Backend(), defer=defer)
        for stream in (False, True):
            admitted = await pipeline.admit(incoming(stream))
            if stream:
                async for _ in pipeline.stream(admitted):
                    pass
            else:
                await pipeline.complete(admitted)
        await asyncio.sleep(0)
        return [dataclasses.replace(r, request_id="") for r in fakes.rows]

    deferred, reference = asyncio.run(rows(True)), asyncio.run(rows(False))
    assert deferred == reference and len(deferred) == 2
