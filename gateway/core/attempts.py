"""One attempt of a call at a backend, and how it ended: its ledger row, metrics and span.

Pure data and pure builders; the pipeline decides when each is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.errors import UpstreamError
from adapters.types import Usage
from gateway.core.cache_money import cache_money, with_autopilot_saving
from gateway.core.calls import Admitted
from gateway.ports import Attempt, CallRecord, Fault, Pricing
from gateway.telemetry import CallLabels, CallSpan, Telemetry


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
    money = cache_money(pricing, model, usage, adm.verdict.diagnosis_json)
    diagnosis = adm.verdict.diagnosis_json
    if money.autopilot_saved_tokens:
        diagnosis = with_autopilot_saving(diagnosis, money)
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


def write_telemetry(telemetry: Telemetry, adm: Admitted, t: Try, out: Outcome) -> None:
    """The attempt's metrics and its span."""
    model, usage, now = adm.route.name, out.usage, out.ended
    candidate = t.attempt.candidate
    labels = CallLabels(adm.call.tenant.tenant, model, candidate.backend_name)
    telemetry.metrics.record_attempt(
        labels, out.status, usage, out.cost_usd, now - t.began, out.ttft_s, out.error_kind
    )
    if t.number == 0 and (queued := queued_ms(adm, t)) is not None:
        telemetry.metrics.observe_queue(model, queued / 1000.0)
    route = adm.call.door_name
    telemetry.record_call(
        CallSpan(route, adm.request_id, t.number, labels, usage, out.status, now - t.began)
    )
