"""A pipeline over real admission (memory or Redis quota store), the real fleet and the real
prompt-cache port, with one scripted self-hosted backend whose every call ends the way the last
user message says (`kind:<outcome>`): the harness for the failure-path tests."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from adapters.backend import BackendCall
from adapters.errors import ProviderRejected, ProviderTimeout, ProviderUnavailable
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
from gateway.core.admission import Admission
from gateway.core.pipeline import IncomingCall, Pipeline, PipelineParts
from gateway.core.prompt_cache import PromptCachePort
from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.window import ContextWindows
from gateway.ports import (
    CacheVerdict,
    CallRecord,
    Candidate,
    ModelRoute,
    PreparedPrompt,
)
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from quotas.store import QuotaStore
from routing.types import ReplicaState

OUTPUT_TOKENS = 5
REPLICA = "http://replica-1/v1"


def _text(request: ChatRequest) -> str:
    return "".join(p.text for p in request.messages[-1].content if isinstance(p, TextPart))


def _kind(request: ChatRequest) -> str:
    text = _text(request)
    return text.split("kind:", 1)[1].split()[0] if "kind:" in text else "ok"


class ScriptedBackend:
    """Ends each call as its prompt says; `hang` outcomes wait until the caller goes away."""

    name, kind, wire = "replica", "selfhost", "openai"

    def __init__(self) -> None:
        self.started = 0
        self.requests: list[ChatRequest] = []  # what each call was sent
        # prompt text -> set once that call's backend is at work (hanging until cancelled)
        self.hanging: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def _fail(self, kind: str) -> None:
        if kind == "upstream_400":
            raise ProviderRejected(self.name, "HTTP 400: maximum context length exceeded", 400)
        if kind in ("upstream_5xx", "mid_stream_5xx"):  # the latter before any output
            raise ProviderUnavailable(self.name, "HTTP 503: overloaded", 503)
        if kind == "connect":
            raise ProviderUnavailable(self.name, "ConnectError: refused")
        if kind == "timeout":
            raise ProviderTimeout(self.name, "timed out (ReadTimeout)")
        if kind == "gateway":
            raise ValueError("cannot encode the body")  # what our own encoding may raise

    async def complete(self, call: BackendCall) -> ChatResponse:
        self.started += 1
        self.requests.append(call.request)
        kind = _kind(call.request)
        self._fail(kind)
        if kind == "disconnect":
            self.hanging[_text(call.request)].set()
            await asyncio.sleep(3600)
        usage = Usage(len(_text(call.request).split()), OUTPUT_TOKENS)
        return ChatResponse("r1", "m", (TextPart("a b c d e"),), "stop", usage)

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        self.started += 1
        kind = _kind(call.request)
        if kind not in ("mid_stream_5xx", "disconnect"):
            self._fail(kind)
        yield StreamStart("r1", "m")
        yield TextDelta(0, "a")
        if kind == "mid_stream_5xx":
            raise ProviderUnavailable(self.name, "connection reset")
        if kind == "disconnect":
            self.hanging[_text(call.request)].set()
            await asyncio.sleep(3600)
        yield StreamEnd("stop", Usage(len(_text(call.request).split()), OUTPUT_TOKENS))

    async def aclose(self) -> None:
        return None


class ExplodingPrompts(PromptCachePort):
    """The real prompt-cache port, raising in `observe` (after the reservation) on request."""

    def observe(
        self, tenant: TenantPolicy, session_id: str, prepared: PreparedPrompt
    ) -> CacheVerdict:
        if _kind(prepared.request) == "observe_error":
            raise RuntimeError("a bug between reserve and dispatch")
        return super().observe(tenant, session_id, prepared)


class Parts:
    """Models, counter, pricing and ledger in one: simple, exact and inspectable."""

    def __init__(self, route: ModelRoute) -> None:
        self.route = route
        self.rows: list[CallRecord] = []

    def get(self, name: str) -> ModelRoute | None:
        return self.route if name == self.route.name else None

    def names(self) -> list[str]:
        return [self.route.name]

    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        return sum(len(p.text.split()) for m in request.messages for p in m.content)  # type: ignore[union-attr]

    def count_text(self, model: str, text: str, scope: str = "") -> int:
        return len(text.split())

    def cost_usd(self, model: str, usage: Usage) -> float:
        return (usage.prompt_tokens + usage.output_tokens) * 1e-6

    def uncached_cost_usd(self, model: str, usage: Usage) -> float:
        return self.cost_usd(model, usage)

    def worst_case_usd(self, model: str, prompt: int, max_output: int, write_ttl: str) -> float:
        return self.cost_usd(model, Usage(prompt, max_output))

    def record(self, row: CallRecord) -> None:
        self.rows.append(row)


@dataclasses.dataclass
class Harness:
    pipeline: Pipeline
    fleet: Fleet
    admission: Admission
    backend: ScriptedBackend
    parts: Parts

    def call(
        self,
        tenant: TenantPolicy,
        text: str,
        *,
        stream: bool = False,
        max_tokens: int | None = 10,
        wire: WireFormat = "openai",
    ) -> IncomingCall:
        request = ChatRequest(
            model="m",
            messages=(Message("user", (TextPart(text),)),),
            max_tokens=max_tokens,
            stream=stream,
        )
        body: Mapping[str, JSON] = {"model": "m", "messages": [{"role": "user", "content": text}]}
        if max_tokens is not None:
            body = {**body, "max_tokens": max_tokens}
        return IncomingCall(wire, tenant, "k1", request, body)

    def replica(self) -> ReplicaState:
        (state,) = self.fleet.stats().replicas
        return state


def build(
    store: QuotaStore,
    *,
    clock: Any = lambda: 1000.0,
    window: int | None = None,
    failures_to_drain: int = 2,
) -> Harness:
    backend = ScriptedBackend()
    candidate = Candidate(backend, "replica", "selfhost", REPLICA)  # type: ignore[arg-type]
    route = ModelRoute("m", (candidate,))
    parts = Parts(route)
    windows = ContextWindows({"replica": window}) if window else None
    fleet = Fleet(
        [route],
        FleetConfig(failures_to_drain=failures_to_drain),
        clock=clock,
        rng=random.Random(7),
        windows=windows,
    )
    admission = Admission(store)
    prompts = ExplodingPrompts(b"secret", registry=CollectorRegistry(), clock=clock)
    services = PipelineParts(
        models=parts,
        counter=parts,
        pricing=parts,
        admission=admission,
        prompts=prompts,
        routing=fleet,
        ledger=parts,
        telemetry=Telemetry(TracerProvider(), Metrics()),
        clock=clock,
        defer_bookkeeping=False,
    )
    return Harness(Pipeline(services), fleet, admission, backend, parts)
