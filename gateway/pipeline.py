"""The path of one call, with no HTTP in it.

policy → cachekeys → quotas.reserve → router → backend (fallback chain) → quotas.settle →
ledger. `admit` does everything that can still reject the call; `complete` and `stream` serve
it and always settle and record, also on upstream errors and client disconnects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass

import anyio

from adapters.backend import BackendCall, RelayedChunk
from adapters.errors import UpstreamError
from adapters.types import (
    JSON,
    ChatRequest,
    ChatResponse,
    Message,
    StreamEvent,
    Usage,
    WireFormat,
)
from gateway.after_reply import AfterReply
from gateway.errors import PermissionDenied, RequestRejected, UnknownModel
from gateway.identifiers import check_identifiers
from gateway.ids import uuid4_hex
from gateway.measure_lane import MeasureLane, measure
from gateway.ports import (
    AdmissionPort,
    Attempt,
    CacheVerdict,
    CallRecord,
    Fault,
    LedgerPort,
    ModelRoute,
    ModelTable,
    PreparedPrompt,
    Pricing,
    PromptPort,
    RoutePlan,
    RoutingPort,
    Ticket,
    TokenCounting,
)
from gateway.stream_tally import StreamTally
from gateway.telemetry import CallLabels, CallSpan, Telemetry
from policies.model import TenantPolicy

DEFAULT_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class IncomingCall:
    wire: WireFormat
    tenant: TenantPolicy
    key_id: str
    request: ChatRequest
    body: Mapping[str, JSON]
    session_header: str | None = None
    body_bytes: int = 0  # the size of the client's body (large ones are measured in a thread)

    def __post_init__(self) -> None:
        # the one check of client identifiers, before anything is reserved or called
        check_identifiers(self.wire, self.request, self.session_header)


@dataclass(frozen=True, slots=True)
class Admitted:
    call: IncomingCall
    request_id: str
    route: ModelRoute
    prepared: PreparedPrompt
    session_id: str
    prompt_tokens: int
    max_tokens: int
    ticket: Ticket
    plan: RoutePlan
    verdict: CacheVerdict
    started_s: float

    def headers(self, admission: AdmissionPort) -> dict[str, str]:
        return {
            "x-lantern-request-id": self.request_id,
            "x-lantern-session": self.session_id,
            "x-lantern-cache": self.verdict.header,
            **admission.rate_headers(self.ticket),
        }


@dataclass(frozen=True, slots=True)
class Services:
    models: ModelTable
    counter: TokenCounting
    pricing: Pricing
    admission: AdmissionPort
    prompts: PromptPort
    routing: RoutingPort
    ledger: LedgerPort
    telemetry: Telemetry
    clock: Callable[[], float] = time.monotonic
    # False: ledger row, metrics and span are written before the reply (the reference path)
    defer_bookkeeping: bool = True
    # False: every stream is decoded to events and re-encoded, also when the client speaks the
    # backend's wire format (the reference path for the relay)
    relay_streams: bool = True
    measure_lane: MeasureLane | None = None  # None: every call is measured on the loop


class Pipeline:
    def __init__(self, services: Services) -> None:
        self.s = services
        self.after_reply = AfterReply(immediate=not services.defer_bookkeeping)

    # --- admission: everything that may still say no ---------------------------------------

    async def admit(self, call: IncomingCall) -> Admitted:
        started = self.s.clock()
        route = self._route_for(call)
        max_tokens = self._max_tokens(call)
        prepared, prompt_tokens = await measure(
            self.s.prompts, self.s.counter, self.s.measure_lane, call, route.name
        )
        cap = call.tenant.limits.max_prompt_tokens
        if cap is not None and prompt_tokens > cap:
            raise RequestRejected(
                f"prompt has {prompt_tokens} tokens; tenant limit max_prompt_tokens is {cap}",
                rule="max_prompt_tokens",
                field="messages",
            )
        max_tokens = self._fit_window(call, route, prompt_tokens, max_tokens)
        session_id = self._session_id(call, prepared)
        worst = self.s.pricing.worst_case_usd(
            route.name, prompt_tokens, max_tokens, prepared.write_ttl
        )
        ticket = await self.s.admission.reserve(
            call.tenant,
            session_id=session_id,
            prompt_tokens=prompt_tokens,
            max_output_tokens=max_tokens,
            worst_case_usd=worst,
        )
        try:  # from here on, any way out but an Admitted gives the reservation back
            plan = self.s.routing.plan(
                route, call.tenant, session_id, prepared, prompt_tokens, max_tokens
            )
            verdict = self.s.prompts.observe(call.tenant, session_id, prepared)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.s.admission.settle(ticket, usage=Usage(), cost_usd=0.0)
            raise
        return Admitted(
            call,
            uuid4_hex(),
            route,
            prepared,
            session_id,
            prompt_tokens,
            max_tokens,
            ticket,
            plan,
            verdict,
            started,
        )

    def _route_for(self, call: IncomingCall) -> ModelRoute:
        model = call.request.model
        route = self.s.models.get(model)
        if route is None:
            raise UnknownModel(model)
        if call.tenant.models and model not in call.tenant.models:
            raise PermissionDenied(
                f"model '{model}' is not allowed for tenant '{call.tenant.tenant}'",
                rule="models",
                field="model",
            )
        allowed = call.tenant.backends
        if allowed is not None and not any(c.backend_name in allowed for c in route.candidates):
            raise PermissionDenied(
                f"no backend of model '{model}' is allowed for tenant '{call.tenant.tenant}'",
                rule="backends",
                field="model",
            )
        return route

    @staticmethod
    def _max_tokens(call: IncomingCall) -> int:
        limits = call.tenant.limits
        cap = limits.max_output_tokens
        asked = call.request.max_tokens
        if asked is None:
            return cap if cap is not None else DEFAULT_MAX_TOKENS
        if asked < 1:
            raise RequestRejected(
                "max_tokens must be at least 1", rule="max_tokens", field="max_tokens"
            )
        if cap is not None and asked > cap:
            if limits.on_max_tokens_over == "clamp":
                return cap
            raise RequestRejected(
                f"max_tokens {asked} exceeds tenant limit max_output_tokens {cap}",
                rule="max_output_tokens",
                field="max_tokens",
            )
        return asked

    def _fit_window(
        self, call: IncomingCall, route: ModelRoute, prompt_tokens: int, max_tokens: int
    ) -> int:
        """`max_tokens` such that prompt + max_tokens fits the route's context window, where
        known: a value the gateway filled in is lowered to fit; one the client asked for that
        does not fit is a 400 (the backend would refuse it after the call was paid for)."""
        window = self.s.routing.context_window(route, call.tenant)
        if window is None or prompt_tokens + max_tokens <= window:
            return max_tokens
        room = window - prompt_tokens
        if room < 1:
            raise RequestRejected(
                f"prompt has {prompt_tokens} tokens; the context window of model "
                f"'{route.name}' is {window} tokens",
                rule="context_window",
                field="messages",
            )
        if call.request.max_tokens is None:
            return room
        raise RequestRejected(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) is more than the "
            f"context window of model '{route.name}' ({window} tokens); at most {room} fits",
            rule="context_window",
            field=_max_tokens_field(call.wire, call.body),
        )

    @staticmethod
    def _session_id(call: IncomingCall, prepared: PreparedPrompt) -> str:
        if call.session_header:
            return call.session_header
        if call.request.session_id:
            return call.request.session_id
        if call.request.prompt_cache_key:
            return call.request.prompt_cache_key
        return prepared.session_root

    # --- serving ----------------------------------------------------------------------------

    def _backend_call(self, adm: Admitted, attempt: Attempt) -> BackendCall:
        request = dataclasses.replace(
            adm.prepared.request,
            max_tokens=adm.max_tokens,
            cache_salt=adm.prepared.cache_salt,
            session_id=adm.session_id,
        )
        same_wire = attempt.candidate.backend.wire == adm.call.wire
        body = dict(adm.prepared.body) if same_wire else None
        if body is not None:
            body[_max_tokens_field(adm.call.wire, body)] = adm.max_tokens
        return BackendCall(request=request, client_wire=adm.call.wire, raw_body=body)

    async def complete(self, adm: Admitted) -> ChatResponse:
        last_error: UpstreamError | None = None
        for t in self._tries(adm):
            try:
                response = await t.attempt.candidate.backend.complete(
                    self._backend_call(adm, t.attempt)
                )
            except UpstreamError as exc:
                last_error = exc
                if self._failed_before_output(adm, t, exc):
                    continue
                break
            except BaseException as exc:  # ours, or the client went away (its prompt is paid)
                status, kind, fault = _gone_or_ours(exc)
                usage = Usage(adm.prompt_tokens) if fault == "client" else Usage()
                with anyio.CancelScope(shield=True):
                    await self._finish(adm, t, status, kind, usage, None, fault)
                raise
            await self._finish(adm, t, "ok", None, response.usage)
            self.after_reply.add(self._extend, adm, t, Message("assistant", response.content))
            return response
        await self._settle_failed(adm)
        assert last_error is not None
        raise last_error

    async def stream(self, adm: Admitted) -> AsyncGenerator[StreamEvent | RelayedChunk, None]:
        """Yield the chosen backend's events, or its relayed chunks when the client speaks the
        backend's wire format; fall back only before the first one."""
        last_error: UpstreamError | None = None
        for t in self._tries(adm):
            tally = StreamTally(adm.route.name, self.s.counter)
            try:
                async for item in self._open_stream(adm, t):
                    if isinstance(item, RelayedChunk):
                        for event in item.events:
                            if tally.see(event, self.s.clock() - t.began):
                                self.s.routing.on_first_token(t.attempt)  # its prefill is done
                    elif tally.see(item, self.s.clock() - t.began):
                        self.s.routing.on_first_token(t.attempt)
                    yield item
            except UpstreamError as exc:
                if tally.started:  # too late to fall back: settle what was produced
                    usage, name = tally.usage(adm.prompt_tokens), type(exc).__name__
                    await self._finish(adm, t, "error", name, usage, tally.ttft_s, _fault(exc))
                    raise
                last_error = exc
                if self._failed_before_output(adm, t, exc):
                    continue
                break
            except BaseException as exc:
                # ours (an Exception: not the backend's fault), or the client went away
                # (cancellation) or closed the generator mid-stream; shielded, because anyio
                # re-cancels every await inside a cancelled scope
                status, kind, fault = _gone_or_ours(exc)
                # an error of ours before any output: nothing was produced to pay for
                ours_early = fault == "gateway" and not tally.started
                usage = Usage() if ours_early else tally.usage(adm.prompt_tokens)
                with anyio.CancelScope(shield=True):
                    await self._finish(adm, t, status, kind, usage, tally.ttft_s, fault)
                raise
            await self._finish(adm, t, "ok", None, tally.usage(adm.prompt_tokens), tally.ttft_s)
            self.after_reply.add(self._extend, adm, t, tally.answer())
            return
        await self._settle_failed(adm)
        assert last_error is not None
        raise last_error

    def _open_stream(
        self, adm: Admitted, t: _Try
    ) -> AsyncIterator[StreamEvent] | AsyncIterator[RelayedChunk]:
        backend = t.attempt.candidate.backend
        call = self._backend_call(adm, t.attempt)
        # a RelayingBackend (adapters/backend.py) when it has `relay`
        relay = getattr(backend, "relay", None) if self.s.relay_streams else None
        if relay is not None and call.raw_body is not None:
            return relay(call)  # type: ignore[no-any-return]
        return backend.stream(call)

    def _tries(self, adm: Admitted) -> Iterator[_Try]:
        """The plan's attempts in order, each dispatched (load counted) as it starts."""
        for number, attempt in enumerate(adm.plan.attempts):
            self.s.routing.on_dispatch(attempt, adm.session_id, adm.prepared)
            yield _Try(number, attempt, self.s.clock())

    def _extend(self, adm: Admitted, t: _Try, answer: Message) -> None:
        """Tell the router the replica now also holds the answer (the session's next prefix)."""
        if t.attempt.candidate.venue == "selfhost" and t.attempt.indexed:
            hashes = self.s.prompts.answer_hashes(
                adm.call.wire, adm.call.tenant, adm.prepared, answer
            )
            self.s.routing.extend(t.attempt, hashes)

    def _failed_before_output(self, adm: Admitted, t: _Try, exc: UpstreamError) -> bool:
        """Record an attempt that produced nothing; True when the next one may be tried."""
        self.s.routing.on_complete(t.attempt, Usage(), ok=False, fault=_fault(exc))
        self._record(adm, t, "error", type(exc).__name__, Usage(), None)
        return exc.retryable

    # --- settle and record ------------------------------------------------------------------

    async def _finish(
        self,
        adm: Admitted,
        t: _Try,
        status: str,
        error_kind: str | None,
        usage: Usage,
        ttft_s: float | None = None,
        fault: Fault = "backend",
    ) -> None:
        """Settle now (the next call of a sequential client must find its slot free); the
        rest of the bookkeeping runs after the reply is out."""
        cost = self.s.pricing.cost_usd(adm.route.name, usage)
        await self.s.admission.settle(adm.ticket, usage=usage, cost_usd=cost)
        out = _Outcome(status, error_kind, usage, ttft_s, cost, self.s.clock(), fault)
        self.s.ledger.record(self._call_record(adm, t, out))  # before the reply completes
        self.after_reply.add(self._close_attempt, adm, t, out)

    def _close_attempt(self, adm: Admitted, t: _Try, out: _Outcome) -> None:
        self.s.routing.on_complete(t.attempt, out.usage, out.status == "ok", out.fault)
        self.s.prompts.reconcile(adm.verdict, out.usage)
        self._write_telemetry(adm, t, out)

    async def _settle_failed(self, adm: Admitted) -> None:
        await self.s.admission.settle(adm.ticket, usage=Usage(), cost_usd=0.0)

    def _record(
        self,
        adm: Admitted,
        t: _Try,
        status: str,
        error_kind: str | None,
        usage: Usage,
        ttft_s: float | None,
    ) -> None:
        cost = self.s.pricing.cost_usd(adm.route.name, usage)
        out = _Outcome(status, error_kind, usage, ttft_s, cost, self.s.clock())
        self.s.ledger.record(self._call_record(adm, t, out))  # before the reply completes
        self.after_reply.add(self._write_telemetry, adm, t, out)

    def _call_record(self, adm: Admitted, t: _Try, out: _Outcome) -> CallRecord:
        """The attempt's ledger row."""
        model, usage = adm.route.name, out.usage
        candidate = t.attempt.candidate
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
            uncached_cost_usd=self.s.pricing.uncached_cost_usd(model, usage),
            ttft_ms=None if out.ttft_s is None else out.ttft_s * 1000.0,
            latency_ms=(out.ended - t.began) * 1000.0,
            cache_diagnosis=adm.verdict.diagnosis_json,
        )

    def _write_telemetry(self, adm: Admitted, t: _Try, out: _Outcome) -> None:
        """The attempt's metrics and its span."""
        model, usage, now = adm.route.name, out.usage, out.ended
        candidate = t.attempt.candidate
        labels = CallLabels(adm.call.tenant.tenant, model, candidate.backend_name)
        self.s.telemetry.metrics.record_attempt(
            labels, out.status, usage, out.cost_usd, now - t.began, out.ttft_s, out.error_kind
        )
        route = "chat.completions" if adm.call.wire == "openai" else "messages"
        self.s.telemetry.record_call(
            CallSpan(route, adm.request_id, t.number, labels, usage, out.status, now - t.began)
        )


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How one attempt ended: what its settle, ledger row, metrics and span say."""

    status: str  # ok | error | client_disconnect
    error_kind: str | None
    usage: Usage
    ttft_s: float | None
    cost_usd: float
    ended: float  # the pipeline's clock when the attempt ended
    fault: Fault = "backend"  # whose fault, when status is not ok


@dataclass(frozen=True, slots=True)
class _Try:
    """One attempt of the plan: its position in the fallback chain and when it started."""

    number: int
    attempt: Attempt
    began: float


def _fault(exc: UpstreamError) -> Fault:
    return "backend" if exc.backend_fault else "request"


def _gone_or_ours(exc: BaseException) -> tuple[str, str | None, Fault]:
    """(status, error kind, fault) of an attempt ended by something other than its backend."""
    if isinstance(exc, Exception):
        return "error", type(exc).__name__, "gateway"
    return "client_disconnect", None, "client"


def _max_tokens_field(wire: WireFormat, body: Mapping[str, JSON]) -> str:
    if wire == "openai" and "max_completion_tokens" in body:
        return "max_completion_tokens"
    return "max_tokens"
