"""`count_tokens`: the prompt tokens a call would be billed, counted on the prompt as the
pipeline sends it (the tenant's provider-cache scope line and every other edit included), and
held to the tenant's request rate like any call. No HTTP in it; it calls nothing but the count.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import anyio

from adapters.backend import BackendCall
from adapters.errors import UpstreamError
from adapters.types import Usage
from gateway.core.attempts import backend_provider
from gateway.core.calls import IncomingCall, route_for
from gateway.core.measure_lane import measure
from gateway.core.pipeline import PipelineParts
from gateway.ports import Candidate, ModelRoute, PreparedPrompt
from gateway.telemetry.operations import OperationTrace, counting_upstream

log = logging.getLogger("lantern.count_tokens")


@dataclass(frozen=True, slots=True)
class PromptCount:
    input_tokens: int
    is_exact: bool  # the provider counted; else the gateway did, as it does for the bill


class PromptCounting:
    def __init__(self, services: PipelineParts) -> None:
        self.s = services

    async def count(self, call: IncomingCall, trace: OperationTrace | None = None) -> PromptCount:
        """The count, from the provider where the backend that would serve the call offers one.
        A request in `requests_per_minute` and `concurrent_requests`; it holds no tokens and
        no dollars (a tenant whose month budget is already spent is refused, as for any call).
        A large body is prepared and counted in the large-call lane's thread. `trace`: the
        door's span, while tracing (the provider's count is a client span under it)."""
        route = route_for(self.s.models, call)
        ticket = await self.s.admission.reserve(
            call.tenant, session_id=None, prompt_tokens=0, max_output_tokens=0, worst_case_usd=0.0
        )
        try:
            prepared, estimate = await measure(
                self.s.prompts, self.s.counter, self.s.measure_lane, call, route.name
            )
            exact = await self._exact(call, route, prepared, trace)
        finally:
            with anyio.CancelScope(shield=True):
                await self.s.admission.settle(ticket, usage=Usage(), cost_usd=0.0)
        return PromptCount(estimate, False) if exact is None else PromptCount(exact, True)

    async def _exact(
        self,
        call: IncomingCall,
        route: ModelRoute,
        prepared: PreparedPrompt,
        trace: OperationTrace | None,
    ) -> int | None:
        """The provider's count of the prepared prompt, when the first allowed backend of the
        route counts tokens and answers; else None. While tracing, the upstream call is a
        client span whose context goes upstream in `traceparent`."""
        allowed = call.tenant.backends
        for candidate in route.candidates:
            if allowed is not None and candidate.backend_name not in allowed:
                continue
            exact = getattr(candidate.backend, "count_tokens", None)
            if exact is None:
                return None  # the backend that would serve the call counts no tokens for us
            same_wire = candidate.backend.wire == call.wire
            try:
                with _upstream_span(trace, call, candidate) as headers:
                    backend_call = BackendCall(
                        prepared.request,
                        call.wire,
                        dict(prepared.body) if same_wire else None,
                        extra_headers=headers,
                        betas=call.betas,
                    )
                    return int(await exact(backend_call))
            except UpstreamError as exc:
                log.warning("count_tokens upstream failed, estimating: %s", exc)
            return None
        return None


def _upstream_span(
    trace: OperationTrace | None, call: IncomingCall, candidate: Candidate
) -> AbstractContextManager[dict[str, str] | None]:
    """The provider count's client span (its headers), or nothing while untraced."""
    if trace is None:
        return nullcontext(None)
    provider = backend_provider(candidate.backend)
    op = counting_upstream(call.request.model, provider, candidate.backend_name, candidate.server)
    return trace.upstream(op)
