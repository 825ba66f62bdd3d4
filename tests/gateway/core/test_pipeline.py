"""The pipeline alone, over a fake for every port it is written against (gateway/ports.py):
the order of its steps, the fallback chain, who is blamed for a failure, and that every way out
settles the reservation and writes one ledger row per attempt. No store, no fleet, no cachekeys.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from adapters.backend import BackendCall
from adapters.errors import ProviderRejected, ProviderUnavailable
from adapters.types import (
    JSON,
    ChatRequest,
    ChatResponse,
    Message,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
    WireFormat,
)
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.errors import RequestRejected
from gateway.ledger.models import JsonText
from gateway.ports import (
    Attempt,
    CacheVerdict,
    CallRecord,
    Candidate,
    Fault,
    ModelRoute,
    PreparedPrompt,
    RoutePlan,
)
from gateway.telemetry import Metrics, Telemetry
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy

TENANT = TenantPolicy(tenant="acme", limits=LimitsPolicy(max_output_tokens=64))
PROMPT_TOKENS = 7


class FakeBackend:
    """Answers, or fails with the error it was given, and remembers every call."""

    kind, wire = "openai_compatible", "anthropic"

    def __init__(self, name: str, error: Exception | None = None, output: int = 3) -> None:
        self.name, self.error, self.output = name, error, output
        self.calls: list[BackendCall] = []

    async def complete(self, call: BackendCall) -> ChatResponse:
        self.calls.append(call)
        if self.error is not None:
            raise self.error
        usage = Usage(PROMPT_TOKENS, self.output)
        return ChatResponse("r", "m", (TextPart("hi"),), "stop", usage)

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        self.calls.append(call)
        if self.error is not None:
            raise self.error
        yield StreamStart("r", "m")
        yield TextDelta(0, "hi")
        yield StreamEnd("stop", Usage(PROMPT_TOKENS, self.output))

    async def aclose(self) -> None:
        return None


@dataclass
class Log:
    """Every port writes what it was asked here, in order."""

    steps: list[str] = field(default_factory=list)
    rows: list[CallRecord] = field(default_factory=list)
    settled: list[Usage] = field(default_factory=list)
    completed: list[tuple[str, bool, Fault]] = field(default_factory=list)


class Ports:
    """Models, counter, pricing, admission, prompts, routing and ledger, all scripted."""

    def __init__(self, log: Log, backends: list[FakeBackend], window: int | None = None):
        self.log, self.window = log, window
        self.route = ModelRoute("m", tuple(Candidate(b, b.name, "api") for b in backends))  # type: ignore[arg-type]

    # ModelTable
    def get(self, name: str) -> ModelRoute | None:
        return self.route if name == "m" else None

    def names(self) -> list[str]:
        return ["m"]

    # TokenCounting
    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        self.log.steps.append("count")
        return PROMPT_TOKENS

    def count_text(self, model: str, text: str, scope: str = "") -> int:
        return len(text.split())

    # Pricing: a dollar per token keeps the arithmetic visible
    def cost_usd(self, model: str, usage: Usage) -> float:
        return float(usage.prompt_tokens + usage.output_tokens)

    def uncached_cost_usd(self, model: str, usage: Usage) -> float:
        return self.cost_usd(model, usage)

    def worst_case_usd(self, model: str, prompt: int, max_output: int, write_ttl: str) -> float:
        return float(prompt + max_output)

    # AdmissionPort
    async def reserve(self, tenant: TenantPolicy, **kw: Any) -> Any:
        self.log.steps.append(f"reserve {kw['prompt_tokens']}+{kw['max_output_tokens']}")
        return "ticket"

    async def settle(self, ticket: Any, *, usage: Usage, cost_usd: float) -> None:
        self.log.steps.append("settle")
        self.log.settled.append(usage)

    def rate_headers(self, ticket: Any) -> dict[str, str]:
        return {}

    # PromptPort
    def ready(self, tenant: str) -> None:
        return None

    def prepare(
        self,
        wire: WireFormat,
        body: Mapping[str, JSON],
        request: ChatRequest,
        tenant: TenantPolicy,
        model: str,
    ) -> PreparedPrompt:
        self.log.steps.append("prepare")
        return PreparedPrompt(body, request, session_root="root", cache_salt="salt")

    def observe(self, tenant: TenantPolicy, session_id: str, prepared: PreparedPrompt) -> Any:
        self.log.steps.append("observe")
        return CacheVerdict("first_call", "{}")

    def reconcile(self, verdict: CacheVerdict, usage: Usage) -> None:
        self.log.steps.append("reconcile")

    def answer_hashes(self, *args: Any) -> tuple[bytes, ...]:
        return ()

    # RoutingPort
    async def recall(self, tenant: str, session_id: str) -> None:
        return None

    def plan(self, route: ModelRoute, tenant: TenantPolicy, *args: Any) -> RoutePlan:
        self.log.steps.append("plan")
        return RoutePlan(tuple(Attempt(c, "test") for c in route.candidates))

    def queue(self, plan: RoutePlan, tenant: TenantPolicy) -> None:
        return None  # no replica at capacity

    def release(self, plan: RoutePlan) -> None:
        self.log.steps.append("release")

    def on_dispatch(self, attempt: Attempt, session_id: str, prepared: PreparedPrompt) -> None:
        self.log.steps.append(f"dispatch {attempt.candidate.backend_name}")

    def on_first_token(self, attempt: Attempt) -> None:
        self.log.steps.append("first_token")

    def on_complete(
        self, attempt: Attempt, usage: Usage, ok: bool, fault: Fault = "backend"
    ) -> None:
        self.log.completed.append((attempt.candidate.backend_name, ok, fault))

    def context_window(self, route: ModelRoute, tenant: TenantPolicy) -> int | None:
        return self.window

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        return None

    # LedgerPort
    def record(self, row: CallRecord) -> None:
        self.log.steps.append(f"record {row.backend} {row.status}")
        self.log.rows.append(row)


def pipeline(*backends: FakeBackend, window: int | None = None) -> tuple[Pipeline, Log]:
    log = Log()
    ports = Ports(log, list(backends), window)
    services = PipelineParts(
        models=ports,
        counter=ports,
        pricing=ports,
        admission=ports,
        prompts=ports,
        routing=ports,
        ledger=ports,
        telemetry=Telemetry(TracerProvider(), Metrics()),
        clock=lambda: 100.0,
        defer_bookkeeping=False,
    )
    return Pipeline(services), log


def call(max_tokens: int | None = 10, stream: bool = False) -> IncomingCall:
    request = ChatRequest(
        model="m",
        messages=(Message("user", (TextPart("hello there"),)),),
        max_tokens=max_tokens,
        stream=stream,
    )
    body: dict[str, JSON] = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    return IncomingCall("openai", TENANT, "k1", request, body)


def test_a_call_is_prepared_counted_reserved_routed_served_settled_and_recorded() -> None:
    pipe, log = pipeline(FakeBackend("a"))
    response = asyncio.run(pipe.complete(asyncio.run(pipe.admit(call()))))
    assert response.usage == Usage(PROMPT_TOKENS, 3)
    assert log.steps == [
        "prepare",
        "count",
        "reserve 7+10",
        "plan",
        "observe",
        "dispatch a",
        "settle",
        "record a ok",
        "reconcile",
    ]
    assert log.settled == [Usage(PROMPT_TOKENS, 3)]
    (row,) = log.rows
    assert (row.tenant, row.key_id, row.attempt, row.cost_usd) == ("acme", "k1", 0, 10.0)
    assert log.completed == [("a", True, "backend")]


def test_a_backend_fault_falls_back_and_each_attempt_has_its_row() -> None:
    down = FakeBackend("a", ProviderUnavailable("a", "HTTP 503: overloaded", 503))
    pipe, log = pipeline(down, FakeBackend("b"))
    asyncio.run(pipe.complete(asyncio.run(pipe.admit(call()))))
    assert [(r.backend, r.attempt, r.status) for r in log.rows] == [
        ("a", 0, "error"),
        ("b", 1, "ok"),
    ]
    assert log.completed == [("a", False, "backend"), ("b", True, "backend")]
    assert log.settled == [Usage(PROMPT_TOKENS, 3)]  # one settle, with what b produced


def test_a_rejected_request_is_not_retried_and_its_reservation_is_given_back() -> None:
    rejecting = FakeBackend("a", ProviderRejected("a", "HTTP 400: bad tool schema", 400))
    spare = FakeBackend("b")
    pipe, log = pipeline(rejecting, spare)
    admitted = asyncio.run(pipe.admit(call()))
    with pytest.raises(ProviderRejected):
        asyncio.run(pipe.complete(admitted))
    assert spare.calls == []
    assert log.completed == [("a", False, "request")]  # the request's fault, not a's
    assert log.settled == [Usage()]
    assert [(r.backend, r.status, r.cost_usd) for r in log.rows] == [("a", "error", 0.0)]


def test_every_backend_down_settles_nothing_owed_and_raises_the_last_error() -> None:
    pipe, log = pipeline(
        FakeBackend("a", ProviderUnavailable("a", "refused")),
        FakeBackend("b", ProviderUnavailable("b", "refused")),
    )
    admitted = asyncio.run(pipe.admit(call()))
    with pytest.raises(ProviderUnavailable, match="b"):
        asyncio.run(pipe.complete(admitted))
    assert log.settled == [Usage()]
    assert [r.status for r in log.rows] == ["error", "error"]


def test_a_stream_reports_its_first_token_and_settles_with_the_streamed_usage() -> None:
    pipe, log = pipeline(FakeBackend("a", output=1))

    async def drain() -> list[StreamEvent]:
        admitted = await pipe.admit(call(stream=True))
        return [e async for e in pipe.stream(admitted)]  # type: ignore[misc]

    events = asyncio.run(drain())
    assert isinstance(events[-1], StreamEnd)
    assert "first_token" in log.steps
    assert log.settled == [Usage(PROMPT_TOKENS, 1)]
    assert [r.status for r in log.rows] == ["ok"]


def test_a_call_that_cannot_fit_the_window_is_refused_before_anything_is_reserved() -> None:
    pipe, log = pipeline(FakeBackend("a"), window=PROMPT_TOKENS + 5)
    with pytest.raises(RequestRejected, match="context window"):
        asyncio.run(pipe.admit(call(max_tokens=10)))
    assert not any(step.startswith("reserve") for step in log.steps)
    assert log.rows == []


def test_a_gateway_filled_max_tokens_is_lowered_to_fit_the_window() -> None:
    pipe, log = pipeline(FakeBackend("a"), window=PROMPT_TOKENS + 5)
    admitted = asyncio.run(pipe.admit(call(max_tokens=None)))
    assert admitted.max_tokens == 5
    assert "reserve 7+5" in log.steps


class BuiltVerdict(Ports):
    """The prompt port's verdict as the real one builds it: the JSON and the object it dumped."""

    def observe(self, tenant: TenantPolicy, session_id: str, prepared: PreparedPrompt) -> Any:
        return CacheVerdict("kept", '{"reason":"kept"}', None, {"reason": "kept"})


def test_only_a_diagnosis_the_port_dumped_reaches_the_ledger_unparsed() -> None:
    pipe, log = pipeline(FakeBackend("a"))
    asyncio.run(pipe.complete(asyncio.run(pipe.admit(call()))))
    pipe.s = replace(pipe.s, prompts=BuiltVerdict(log, [], None))
    asyncio.run(pipe.complete(asyncio.run(pipe.admit(call()))))
    plain, built_row = log.rows
    # text alone (a port that kept no object) is parsed by the ledger; the dumped object's is not
    assert (type(plain.cache_diagnosis), plain.cache_diagnosis) == (str, "{}")
    assert type(built_row.cache_diagnosis) is JsonText
    assert built_row.cache_diagnosis == '{"reason":"kept"}'
