"""The path of one call, with no HTTP in it.

policy → cachekeys → quotas.reserve (and, at once, the shared affinity's recall) → router →
backend (fallback chain) → quotas.settle → ledger. `admit` does everything that can still reject
the call; `complete` and `stream` serve it and always settle and record, also on upstream errors
and client disconnects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import anyio

from adapters.backend import BackendCall, RelayedChunk
from adapters.errors import UpstreamError
from adapters.records import evolve
from adapters.types import ChatResponse, Message, PublicHead, StreamEvent, Usage
from gateway.core.after_reply import AfterReply
from gateway.core.attempts import (
    Outcome,
    Try,
    begin_attempt,
    call_record,
    end_failed,
    fault_of,
    gone_or_ours,
    traced,
    write_telemetry,
)
from gateway.core.calls import (
    Admitted,
    IncomingCall,
    budget_session_for,
    check_prompt_cap,
    fit_window,
    max_tokens_field,
    max_tokens_for,
    route_for,
    session_id_for,
    session_key,
    thinking_budget_for,
    with_thinking_budget,
)
from gateway.core.fanout import FanoutGate, Lead, with_fanout_wait
from gateway.core.measure_lane import MeasureLane, measure
from gateway.core.prompt_prepare import scoped_native_body
from gateway.core.reserve_recall import reserve_recalling
from gateway.core.stream_tally import StreamTally
from gateway.core.translation import check_translatable
from gateway.ids import uuid4_hex
from gateway.ports import (
    AdmissionPort,
    Fault,
    LedgerPort,
    ModelTable,
    Pricing,
    PromptPort,
    RoutingPort,
    TokenCounting,
)
from gateway.telemetry import Telemetry

__all__ = ["Admitted", "CallObserver", "IncomingCall", "Pipeline", "PipelineParts"]


class CallObserver(Protocol):
    """Told of every call served well, after its reply is out (keep-warm reads ride on this)."""

    def note(self, adm: Admitted, usage: Usage, backend_kind: str) -> None: ...


@dataclass(frozen=True, slots=True)
class PipelineParts:
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
    def __init__(self, services: PipelineParts) -> None:
        self.s = services
        self.after_reply = AfterReply(immediate=not services.defer_bookkeeping)
        self.observers: list[CallObserver] = []  # told of every call served well
        self.fanout = FanoutGate()  # one write per prefix for calls that come together

    # --- admission: everything that may still say no ---------------------------------------

    async def admit(self, call: IncomingCall) -> Admitted:
        started = self.s.clock()
        route = route_for(self.s.models, call)
        check_translatable(call.wire, call.body, route)
        max_tokens = max_tokens_for(call)
        ready = self.s.prompts.ready(call.tenant.tenant)  # shared learnt places, now and then
        if ready is not None:
            await ready
        prepared, prompt_tokens = await measure(
            self.s.prompts, self.s.counter, self.s.measure_lane, call, route.name
        )
        check_prompt_cap(call, prompt_tokens)
        window = self.s.routing.context_window(route, call.tenant)
        max_tokens = fit_window(call, route, prompt_tokens, max_tokens, window)
        lowered = max_tokens != call.request.max_tokens  # by the cap, the window or a default
        budget = thinking_budget_for(call, max_tokens) if lowered else None
        session_id = session_id_for(call, prepared)
        key = session_key(call.tenant.tenant, session_id)  # what the tables know it by
        worst = self.s.pricing.worst_case_usd(
            route.name, prompt_tokens, max_tokens, prepared.write_ttl
        )
        ticket = await reserve_recalling(
            self.s.admission,
            self.s.routing,
            call.tenant,
            key,
            budget_session=budget_session_for(call),
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            worst_case_usd=worst,
        )
        plan = None
        try:  # from here on, any way out but an Admitted gives the reservation (and slot) back
            plan = self.s.routing.plan(route, call.tenant, key, prepared, prompt_tokens, max_tokens)
            waiting = self.s.routing.queue(plan, call.tenant)  # None: a slot is free
            if waiting is not None:
                plan = await waiting
            verdict = self.s.prompts.observe(call.tenant, key, prepared)
        except BaseException:
            if plan is not None:
                self.s.routing.release(plan)
            with anyio.CancelScope(shield=True):
                await self.s.admission.settle(ticket, usage=Usage(), cost_usd=0.0)
            raise
        adm = Admitted(
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
            thinking_budget=budget,
        )
        return traced(adm, self.s.telemetry, self.s.clock()) if self.s.telemetry.is_tracing else adm

    # --- serving ----------------------------------------------------------------------------

    def _backend_call(self, adm: Admitted, t: Try) -> BackendCall:
        attempt = t.attempt
        request = evolve(  # dataclasses.replace, less its per-field checks
            adm.prepared.request,
            max_tokens=adm.max_tokens,
            cache_salt=adm.prepared.cache_salt,
            cache_public=PublicHead(*adm.prepared.public_head),
            session_id=adm.session_id,
        )
        same_wire = attempt.candidate.backend.wire == adm.call.wire
        body = dict(adm.prepared.body) if same_wire else None
        if body is not None:
            body[max_tokens_field(adm.call.wire, body)] = adm.max_tokens
        if adm.thinking_budget is not None:  # lowered with max_tokens: both say so
            request, body = with_thinking_budget(request, body, adm.thinking_budget)
        native = adm.call.native_body
        if native is not None:  # scoped as the prepared chat body is
            native = scoped_native_body(native, adm.prepared, adm.call.tenant.cache)
        return BackendCall(
            request=request,
            client_wire=adm.call.wire,
            raw_body=body,
            native_body=native,
            betas=adm.call.betas,
            # the attempt's span context, in `traceparent`
            extra_headers=None if adm.trace is None else begin_attempt(adm.trace, t),
        )

    async def _turn(self, adm: Admitted, streaming: bool) -> tuple[Lead | None, Admitted]:
        """A call expected to write a prefix head that another call to the same upstream is
        writing now waits for that call's first byte (then reads it); a streamed one leads
        when none is. The common path (a read expected) is one attribute test."""
        write_key = adm.verdict.write_key
        if write_key is None:
            return None, adm
        candidate = adm.plan.attempts[0].candidate
        key = (adm.call.tenant.tenant, write_key, f"{candidate.backend_name}\0{candidate.replica}")
        try:
            lead, waited_s = await self.fanout.turn(key, streaming)
        except BaseException:  # the client went away while waiting: nothing was sent
            with anyio.CancelScope(shield=True):
                self.s.routing.release(adm.plan)
                await self._settle_failed(adm)
            raise
        if waited_s is not None:  # the ledger's diagnosis says so
            adm = dataclasses.replace(adm, verdict=with_fanout_wait(adm.verdict, waited_s))
        return lead, adm

    async def complete(self, adm: Admitted) -> ChatResponse:
        _, adm = await self._turn(adm, streaming=False)  # a reply shows no first byte: never leads
        last_error: UpstreamError | None = None
        for t in self._tries(adm):
            try:
                response = await t.attempt.candidate.backend.complete(self._backend_call(adm, t))
            except UpstreamError as exc:
                last_error = exc
                if self._failed_before_output(adm, t, exc):
                    continue
                break
            except BaseException as exc:  # ours, or the client went away (its prompt is paid)
                status, kind, fault = gone_or_ours(exc)
                usage = Usage(adm.prompt_tokens) if fault == "client" else Usage()
                with anyio.CancelScope(shield=True):
                    await self._finish(adm, t, status, kind, usage, None, fault)
                raise
            reply = (response.model, response.stop_reason)
            answer = Message("assistant", response.content)
            await self._finish(adm, t, "ok", None, response.usage, reply=reply, answer=answer)
            if _extends_prefix(t):
                self.after_reply.add(self._extend, adm, t, answer)
            return response
        assert last_error is not None
        await self._settle_failed(adm, type(last_error).__name__)
        raise last_error

    async def stream(self, adm: Admitted) -> AsyncGenerator[StreamEvent | RelayedChunk, None]:
        """Yield the chosen backend's events, or its relayed chunks when the client speaks the
        backend's wire format; fall back only before the first one."""
        lead, adm = await self._turn(adm, streaming=True)
        try:
            last_error: UpstreamError | None = None
            for t in self._tries(adm):
                tally = StreamTally(adm.route.name, self.s.counter, adm.call.tenant.tenant)
                try:
                    async for item in self._open_stream(adm, t):
                        if isinstance(item, RelayedChunk):
                            for event in item.events:
                                if tally.see(event, self.s.clock() - t.began):
                                    self._first_token(t, lead)
                        elif tally.see(item, self.s.clock() - t.began):
                            self._first_token(t, lead)
                        yield item
                except UpstreamError as exc:
                    if tally.started:  # too late to fall back: settle what was produced
                        usage, name = tally.usage(adm.prompt_tokens), type(exc).__name__
                        await self._finish(
                            adm, t, "error", name, usage, tally.ttft_s, fault_of(exc)
                        )
                        raise
                    last_error = exc
                    if self._failed_before_output(adm, t, exc):
                        continue
                    break
                except BaseException as exc:
                    # ours (an Exception: not the backend's fault), or the client went away
                    # (cancellation) or closed the generator mid-stream; shielded, because anyio
                    # re-cancels every await inside a cancelled scope
                    status, kind, fault = gone_or_ours(exc)
                    if status == "client_disconnect" and tally.ended:
                        status = "ok"  # closed after the end event went out: a complete reply
                    # an error of ours before any output: nothing was produced to pay for
                    ours_early = fault == "gateway" and not tally.started
                    usage = Usage() if ours_early else tally.usage(adm.prompt_tokens)
                    with anyio.CancelScope(shield=True):
                        await self._finish(adm, t, status, kind, usage, tally.ttft_s, fault)
                    raise
                usage, reply = tally.usage(adm.prompt_tokens), (tally.said_model, tally.stop_reason)
                answer = tally.answer() if _keeps_answer(adm, t) else None  # the rare cases
                await self._finish(
                    adm, t, "ok", None, usage, tally.ttft_s, reply=reply, answer=answer
                )
                if answer is not None and _extends_prefix(t):
                    self.after_reply.add(self._extend, adm, t, answer)
                return
            assert last_error is not None
            await self._settle_failed(adm, type(last_error).__name__)
            raise last_error
        finally:
            if lead is not None:  # failed or cancelled before its first byte: waiters go now
                lead.release()

    def _first_token(self, t: Try, lead: Lead | None) -> None:
        self.s.routing.on_first_token(t.attempt)  # its prefill is done
        if lead is not None:  # and the prefix it wrote is readable
            lead.release()

    def _open_stream(
        self, adm: Admitted, t: Try
    ) -> AsyncIterator[StreamEvent] | AsyncIterator[RelayedChunk]:
        backend = t.attempt.candidate.backend
        call = self._backend_call(adm, t)
        # a RelayingBackend (adapters/backend.py) when it has `relay`
        relay = getattr(backend, "relay", None) if self.s.relay_streams else None
        if relay is not None and call.raw_body is not None:
            return relay(call)  # type: ignore[no-any-return]
        return backend.stream(call)

    def _tries(self, adm: Admitted) -> Iterator[Try]:
        """The plan's attempts in order, each dispatched (load counted) as it starts."""
        for number, attempt in enumerate(adm.plan.attempts):
            self.s.routing.on_dispatch(attempt, adm.session_key, adm.prepared)
            yield Try(number, attempt, self.s.clock())

    def _extend(self, adm: Admitted, t: Try, answer: Message) -> None:
        """Tell the router the replica now also holds the answer (the session's next prefix);
        for an attempt that `_extends_prefix`."""
        hashes = self.s.prompts.answer_hashes(adm.call.wire, adm.call.tenant, adm.prepared, answer)
        self.s.routing.extend(t.attempt, hashes)

    def _failed_before_output(self, adm: Admitted, t: Try, exc: UpstreamError) -> bool:
        """Record an attempt that produced nothing; True when the next one may be tried."""
        self.s.routing.on_complete(t.attempt, Usage(), ok=False, fault=fault_of(exc))
        self._record(adm, t, "error", type(exc).__name__, Usage(), None)
        return exc.retryable

    # --- settle and record ------------------------------------------------------------------

    async def _finish(
        self,
        adm: Admitted,
        t: Try,
        status: str,
        error_kind: str | None,
        usage: Usage,
        ttft_s: float | None = None,
        fault: Fault = "backend",
        reply: tuple[str | None, str | None] = (None, None),  # the upstream's model, stop reason
        answer: Message | None = None,  # the reply itself (a traced tenant may record it)
    ) -> None:
        """Settle now (the next call of a sequential client must find its slot free); the
        rest of the bookkeeping runs after the reply is out. A client that goes while the
        settle waits on its store (the settle itself goes on, shielded) cancels none of it:
        the call's row is written and its attempt closed all the same."""
        cost = self.s.pricing.cost_usd(adm.route.name, usage)
        try:
            await self.s.admission.settle(adm.ticket, usage=usage, cost_usd=cost)
        finally:
            out = Outcome(
                status, error_kind, usage, ttft_s, cost, self.s.clock(), fault, *reply, answer
            )
            self.s.ledger.record(call_record(adm, t, out, self.s.pricing))  # before the reply
            self.after_reply.add(self._close_attempt, adm, t, out)

    def _close_attempt(self, adm: Admitted, t: Try, out: Outcome) -> None:
        self.s.routing.on_complete(t.attempt, out.usage, out.status == "ok", out.fault)
        self.s.prompts.reconcile(adm.verdict, out.usage)
        write_telemetry(self.s.telemetry, adm, t, out)
        if out.status == "ok":
            for observer in self.observers:
                observer.note(adm, out.usage, t.attempt.candidate.backend.kind)

    async def _settle_failed(self, adm: Admitted, error_type: str = "cancelled") -> None:
        await self.s.admission.settle(adm.ticket, usage=Usage(), cost_usd=0.0)
        if adm.trace is not None:
            self.after_reply.add(end_failed, adm.trace, error_type, self.s.clock() - adm.started_s)

    def _record(
        self,
        adm: Admitted,
        t: Try,
        status: str,
        error_kind: str | None,
        usage: Usage,
        ttft_s: float | None,
    ) -> None:
        cost = self.s.pricing.cost_usd(adm.route.name, usage)
        out = Outcome(status, error_kind, usage, ttft_s, cost, self.s.clock())
        self.s.ledger.record(call_record(adm, t, out, self.s.pricing))  # before the reply completes
        self.after_reply.add(write_telemetry, self.s.telemetry, adm, t, out, False)


def _extends_prefix(t: Try) -> bool:
    """The answer extends the prefix the router knows on this attempt's replica."""
    return t.attempt.candidate.venue == "selfhost" and t.attempt.indexed


def _keeps_answer(adm: Admitted, t: Try) -> bool:
    """A stream's answer is assembled only where it is used after the reply: a self-hosted
    replica's prefix grows by it, or a traced tenant records content."""
    traced = adm.trace is not None and adm.call.tenant.tracing.record_content
    return traced or _extends_prefix(t)
