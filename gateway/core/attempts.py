"""One attempt of a call at a backend, and how it ended: its ledger row, metrics and span.

Pure data and pure builders; the pipeline decides when each is written.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from adapters.backend import Backend
from adapters.errors import UpstreamError
from adapters.records import slot_init
from adapters.types import Message, Usage
from gateway.core.cache_money import cache_money_of, saving_json
from gateway.core.calls import Admitted, IncomingCall
from gateway.ledger.models import JsonText
from gateway.ports import Attempt, CallRecord, Fault, Pricing
from gateway.telemetry import (
    AttemptFacts,
    AttemptMetrics,
    CallFacts,
    CallLabels,
    CallTrace,
    Ending,
    Telemetry,
)
from gateway.telemetry.content import Content, call_content

# gen_ai.provider.name by backend kind; an OpenAI-compatible one is named by its wire
_PROVIDERS = {"bedrock": "aws.bedrock", "anthropic": "anthropic", "selfhost": "lantern"}


@slot_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended: what its settle, ledger row, metrics and span say."""

    status: str  # ok | error | client_disconnect
    error_kind: str | None
    usage: Usage
    ttft_s: float | None
    cost_usd: float
    ended: float  # the pipeline's clock when the attempt ended
    fault: Fault = "backend"  # whose fault, when status is not ok
    response_model: str | None = None  # the model the upstream says answered
    finish_reason: str | None = None
    answer: Message | None = None  # the reply, kept for a traced tenant's opt-in content


@slot_init
@dataclass(frozen=True, slots=True)
class Try:
    """One attempt of the plan: its position in the fallback chain and when it started."""

    number: int
    attempt: Attempt
    began: float


def fault_of(exc: UpstreamError) -> Fault:
    """Whose fault an upstream error is: the backend's, or the request's (a 4xx it caused)."""
    return "backend" if exc.backend_fault else "request"


def gone_or_ours(exc: BaseException) -> tuple[str, str | None, Fault]:
    """(status, error kind, fault) of an attempt ended by something other than its backend."""
    if isinstance(exc, Exception):
        return "error", type(exc).__name__, "gateway"
    return "client_disconnect", None, "client"


def call_record(adm: Admitted, t: Try, out: Outcome, pricing: Pricing) -> CallRecord:
    """The attempt's ledger row."""
    model, usage = adm.route.name, out.usage
    candidate = t.attempt.candidate
    body = adm.verdict.diagnosis or adm.verdict.diagnosis_body()  # no call when it is at hand
    money = cache_money_of(pricing, model, usage, body)
    diagnosis: str = adm.verdict.diagnosis_json
    if adm.verdict.diagnosis is not None:  # the port dumped it from this object: no re-parse
        diagnosis = JsonText(diagnosis)
    if money.autopilot_saved_tokens:
        diagnosis = JsonText(saving_json(body, money))  # orjson.dumps wrote it
    return CallRecord(
        request_id=adm.request_id,
        attempt=t.number,
        tenant=adm.call.tenant.tenant,
        key_id=adm.call.key_id,
        session_id=adm.session_id,
        model=model,
        backend=candidate.backend_name,
        replica=candidate.replica,
        status=out.status,
        error_kind=out.error_kind,
        usage=usage,
        cost_usd=out.cost_usd,
        uncached_cost_usd=pricing.uncached_cost_usd(model, usage),
        ttft_ms=None if out.ttft_s is None else out.ttft_s * 1000.0,
        latency_ms=(out.ended - t.began) * 1000.0,
        cache_diagnosis=diagnosis,
        door=adm.call.door_name,
        cache_saved_usd=money.saved_usd,
        cache_premium_usd=money.premium_usd,
        cache_lost_usd=money.lost_usd,
        cache_cause=money.cause,
        queue_ms=queued_ms(adm, t),
    )


def queued_ms(adm: Admitted, t: Try) -> float | None:
    """The time the call waited for its first replica's slot, on its first attempt."""
    queued = adm.plan.details.get("queued_ms") if t.number == 0 else None
    return float(queued) if isinstance(queued, int | float) else None


def backend_provider(backend: Backend) -> str:
    """`backend`'s `gen_ai.provider.name` (a well-known value where the convention has one)."""
    return _PROVIDERS.get(backend.kind) or backend.wire or backend.kind


def write_telemetry(
    telemetry: Telemetry, adm: Admitted, t: Try, out: Outcome, final: bool = True
) -> None:
    """The attempt's metrics and span; `final`: the call's too (no attempt follows)."""
    model, usage, now = adm.route.name, out.usage, out.ended
    candidate = t.attempt.candidate
    labels = CallLabels(
        adm.call.tenant.tenant, model, candidate.backend_name, backend_provider(candidate.backend)
    )
    trace = adm.trace
    telemetry.metrics.record_attempt(
        AttemptMetrics(
            labels,
            out.status,
            usage,
            out.cost_usd,
            now - t.began,
            out.ttft_s,
            out.error_kind,
            None if trace is None else trace.trace_id,
        )
    )
    if t.number == 0 and (queued := queued_ms(adm, t)) is not None:
        telemetry.metrics.observe_queue(model, queued / 1000.0)
    if trace is not None:
        content = None
        if out.answer is not None and adm.call.tenant.tracing.record_content:
            content = call_content(adm.call.request, out.answer, out.finish_reason)
        trace.end_attempt(t.number, ending(out, now - t.began, content))
        if final:
            trace.end(ending(out, now - adm.started_s, content))


def ending(out: Outcome, duration_s: float, content: Content | None = None) -> Ending:
    return Ending(
        out.status,
        out.error_kind,
        out.usage,
        out.cost_usd,
        duration_s,
        out.ttft_s,
        out.response_model,
        out.finish_reason,
        content,
    )


def traced(adm: Admitted, telemetry: Telemetry, now: float) -> Admitted:
    """The admitted call with its server span begun (at its arrival)."""
    call = adm.call
    facts = CallFacts(
        model=call.request.model,
        tenant=call.tenant.tenant,
        request_id=adm.request_id,
        conversation_id=adm.session_id,
        door=call.door_name,
        stream=bool(call.request.stream),
        max_tokens=adm.max_tokens,
        cache=adm.verdict.header,
    )
    trace = telemetry.trace_call(facts, call.trace, now - adm.started_s)
    return dataclasses.replace(adm, trace=trace)


def refused(
    telemetry: Telemetry,
    call: IncomingCall,
    error_type: str,
    elapsed_s: float,
    provider: str | None = None,
) -> None:
    """The server span of a call refused before it was admitted, ended with why; `provider`:
    the `gen_ai.provider.name` of the backend that would have served it, when there is one."""
    facts = CallFacts(
        model=call.request.model,
        tenant=call.tenant.tenant,
        request_id="",
        conversation_id=call.session_header or "",
        door=call.door_name,
        stream=bool(call.request.stream),
        max_tokens=call.request.max_tokens,  # None: the client set none
        cache="",
    )
    trace = telemetry.trace_call(facts, call.trace, elapsed_s)
    named = None if provider is None else {ga.GEN_AI_PROVIDER_NAME: provider}
    trace.end(Ending("rejected", error_type, Usage(), 0.0, elapsed_s, attributes=named))


def begin_attempt(trace: CallTrace, t: Try) -> dict[str, str]:
    """Begin the attempt's client span; the headers that carry its context upstream."""
    c = t.attempt.candidate
    provider = backend_provider(c.backend)
    facts = AttemptFacts(t.number, provider, c.backend_name, c.venue, c.replica, c.server)
    return trace.begin_attempt(facts, time.time_ns())


def end_failed(trace: CallTrace, error_type: str | None, duration_s: float) -> None:
    """End the call's span when no attempt answered (or none was made)."""
    trace.end(Ending("error", error_type, Usage(), 0.0, duration_s))
