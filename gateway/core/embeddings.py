"""One embeddings call: the model's route and the tenant's right to it, the input counted, held
to the tenant's `max_prompt_tokens` and reserved like any prompt, the first backend that serves
embeddings, settled, recorded, metered and traced (gateway/core/embedding_telemetry.py).
No HTTP in it; the same quotas, prices and ledger as the chat pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from adapters.backend import (
    EmbeddingBackend,
    EmbeddingReply,
    check_embedding,
    serves_embeddings,
)
from adapters.types import JSON, ChatRequest, Usage
from adapters.wire.json_fields import optional
from gateway.core.attempts import backend_provider, gone_or_ours
from gateway.core.calls import IncomingCall, check_prompt_cap, route_for
from gateway.core.embedding_telemetry import EmbeddingTelemetry
from gateway.core.pipeline import PipelineParts
from gateway.errors import RequestRejected
from gateway.ids import uuid4_hex
from gateway.ports import CallRecord, Candidate, ModelRoute, Ticket, TokenCounting
from gateway.telemetry import ClientTrace
from policies.model import TenantPolicy

EMBEDDINGS_SESSION = "embeddings"  # the ledger's session column for calls outside any session
TIMEOUT_S = 120.0  # the backend applies the lower of this and its configured timeout
# OpenAI's limit on any `input` array ("2048 dimensions or less"): past it a list of texts is
# one upstream call per text on some backends (Bedrock Titan), all from one request
MAX_INPUTS = 2048


@dataclass(frozen=True, slots=True)
class EmbeddingCall:
    tenant: TenantPolicy
    key_id: str
    body: Mapping[str, JSON]
    session_header: str | None = None  # `x-session-id`, checked like every door's
    body_bytes: int = 0  # the size of the client's body (a large input is counted in a thread)
    trace: ClientTrace | None = None  # the client's trace context (read only while tracing)


def input_texts(body: Mapping[str, JSON]) -> tuple[list[str], int]:
    """The texts of `input` and the tokens given as token arrays; a 400 naming `input` for
    any other shape, or an array of more than `MAX_INPUTS`."""
    value = body.get("input")
    if isinstance(value, str):
        return [value], 0
    if isinstance(value, list) and len(value) > MAX_INPUTS:
        raise RequestRejected(
            f"input: {len(value)} items; an array holds at most {MAX_INPUTS}",
            rule="max_inputs",
            field="input",
        )
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return list(value), 0
        if all(isinstance(v, int) for v in value):
            return [], len(value)
        if all(isinstance(v, list) and all(isinstance(t, int) for t in v) for v in value):
            return [], sum(len(v) for v in value)
    raise RequestRejected(
        "input: expected a string, a list of strings, or token arrays (non-empty)",
        rule="invalid_request",
        field="input",
    )


def check_dimensions(body: Mapping[str, JSON]) -> None:
    """`dimensions`, when given, is a positive integer (OpenAI's document): anything else is a
    400 naming it here, not an upstream's refusal without a field after a reservation."""
    value = body.get("dimensions")
    if value is None:
        return
    if type(value) is not int or value < 1:
        raise RequestRejected(
            "dimensions: expected a positive integer", rule="invalid_request", field="dimensions"
        )


def count_texts(counter: TokenCounting, model: str, texts: list[str], scope: str) -> int:
    """`scope`: the tenant (its memo entries alone are read)."""
    return sum(counter.count_text(model, t, scope) for t in texts)


class Embeddings:
    def __init__(self, services: PipelineParts) -> None:
        self.s = services

    async def embed(self, call: EmbeddingCall) -> EmbeddingReply:
        model = call.body.get("model")
        request_id = uuid4_hex()
        seen = EmbeddingTelemetry(
            self.s.telemetry,
            call.tenant.tenant,
            model if isinstance(model, str) else "",  # none named: its span says why
            request_id,
            call.session_header,
            call.trace,
            self.s.clock,
        )
        try:
            if not isinstance(model, str):
                raise RequestRejected(
                    "model: required (a string)", rule="invalid_request", field="model"
                )
            route, candidate, ticket, prompt_tokens = await self._admit(call, model)
        except Exception as exc:
            seen.refused(exc, lambda: self._provider(model, call.tenant))
            raise
        began = self.s.clock()
        backend: EmbeddingBackend = candidate.backend  # type: ignore[assignment]
        try:
            reply = await backend.embed(call.body, TIMEOUT_S, seen.begin(candidate))
        except BaseException as exc:
            # the client went away: its input was sent, and is paid as the chat doors' prompt
            status, error, fault = gone_or_ours(exc)
            usage = Usage(input_tokens=prompt_tokens) if fault == "client" else Usage()
            cost = self.s.pricing.cost_usd(route.name, usage)
            with anyio.CancelScope(shield=True):
                await self.s.admission.settle(ticket, usage=usage, cost_usd=cost)
            self._record(call, request_id, route, candidate, usage, cost, began, status, error)
            seen.end(route.name, candidate, usage, cost, began, status, error, call.body, None)
            raise
        usage = Usage(input_tokens=reply.prompt_tokens)
        cost = self.s.pricing.cost_usd(route.name, usage)
        await self.s.admission.settle(ticket, usage=usage, cost_usd=cost)
        self._record(call, request_id, route, candidate, usage, cost, began, "ok", None)
        seen.end(route.name, candidate, usage, cost, began, "ok", None, call.body, reply.body)
        return _as_asked(reply, model)

    async def _admit(
        self, call: EmbeddingCall, model: str
    ) -> tuple[ModelRoute, Candidate, Ticket, int]:
        """Everything that may still refuse the call: its route and backend, its input, its
        prompt cap; then its tokens reserved (the ticket to settle, and the count reserved)."""
        user = optional(call.body, "user", str)  # the end-user id the ledger may keep
        request = ChatRequest(model, (), user=user)
        incoming = IncomingCall(  # checks the identifiers, as every door does
            "openai", call.tenant, call.key_id, request, call.body, call.session_header
        )
        route = route_for(self.s.models, incoming)
        candidate = self._embedder(route, call.tenant)
        texts, num_tokens = input_texts(call.body)
        check_dimensions(call.body)
        check_embedding(candidate.backend, call.body)
        tokens = await self._count(model, texts, call.body_bytes, call.tenant.tenant)
        prompt_tokens = num_tokens + tokens
        check_prompt_cap(incoming, prompt_tokens, "input")  # a list's total, before reserving
        worst = self.s.pricing.worst_case_usd(route.name, prompt_tokens, 0, "5m")
        ticket = await self.s.admission.reserve(
            call.tenant,
            session_id=None,
            prompt_tokens=prompt_tokens,
            max_output_tokens=0,
            worst_case_usd=worst,
        )
        return route, candidate, ticket, prompt_tokens

    async def _count(self, model: str, texts: list[str], body_bytes: int, scope: str) -> int:
        """Tokens of `texts`; a large body's in the large-call lane's thread, with its own
        counter (the loop's memos are never touched from a thread)."""
        lane = self.s.measure_lane
        if lane is None or body_bytes < lane.min_body_bytes:
            return count_texts(self.s.counter, model, texts, scope)
        return await lane.threads.run(scope, count_texts, lane.counter, model, texts, scope)

    def _provider(self, model: object, tenant: TenantPolicy) -> str | None:
        """The provider of the backend that would serve `model` for `tenant`, if any."""
        route = self.s.models.get(model) if isinstance(model, str) else None
        if route is None:
            return None
        try:
            return backend_provider(self._embedder(route, tenant).backend)
        except RequestRejected:  # no backend of it serves embeddings
            return None

    def _embedder(self, route: ModelRoute, tenant: TenantPolicy) -> Candidate:
        """The first allowed backend of the route that serves embeddings."""
        for candidate in route.candidates:
            allowed = tenant.backends is None or candidate.backend_name in tenant.backends
            if allowed and serves_embeddings(candidate.backend):
                return candidate
        raise RequestRejected(
            f"model '{route.name}' has no backend that serves embeddings (an OpenAI-compatible "
            "upstream, LiteLLM and a Bedrock embedding model do; Anthropic, the bundled engine "
            "and Bedrock chat models do not)",
            rule="embeddings_unsupported",
            field="model",
        )

    def _record(
        self,
        call: EmbeddingCall,
        request_id: str,
        route: ModelRoute,
        candidate: Candidate,
        usage: Usage,
        cost_usd: float,
        began: float,
        status: str,
        error_kind: str | None,
    ) -> None:
        row = CallRecord(
            request_id=request_id,
            attempt=0,
            tenant=call.tenant.tenant,
            key_id=call.key_id,
            session_id=EMBEDDINGS_SESSION,
            model=route.name,
            backend=candidate.backend_name,
            replica=candidate.replica,
            status=status,
            error_kind=error_kind,
            usage=usage,
            cost_usd=cost_usd,
            uncached_cost_usd=self.s.pricing.uncached_cost_usd(route.name, usage),
            ttft_ms=None,
            latency_ms=(self.s.clock() - began) * 1000.0,
            cache_diagnosis=None,
            door="embeddings",
        )
        self.s.ledger.record(row)


def _as_asked(reply: EmbeddingReply, model: str) -> EmbeddingReply:
    """The reply naming the model the client asked for, as the chat doors do (the upstream's
    own name is the backend's business); every other field as the upstream sent it."""
    if reply.body.get("model", model) == model:
        return reply
    return EmbeddingReply({**reply.body, "model": model}, reply.prompt_tokens)
