"""The spans of one call in OpenTelemetry's GenAI conventions: the gateway's server span, child
of the client's `traceparent`, and one client span per upstream attempt, whose context goes
upstream. Built only while a processor would receive them; no prompt or completion text unless
the tenant opted in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from adapters.types import Usage
from gateway.ports import ServerAddress
from gateway.telemetry.content import Content

W3C = TraceContextTextMapPropagator()  # stateless: reads and writes `traceparent`/`tracestate`


@dataclass(frozen=True, slots=True)
class ClientTrace:
    """The W3C trace context a client sent with its call."""

    traceparent: str
    tracestate: str | None = None


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What the gateway knows of a call once admitted."""

    model: str  # the model the client asked for
    tenant: str
    request_id: str
    conversation_id: str  # the agent session
    door: str
    stream: bool | None  # None: the operation has no such request field (embeddings)
    max_tokens: int | None
    cache: str  # the cache diagnosis, as `x-lantern-cache` says it
    operation: str = ga.GenAiOperationNameValues.CHAT.value


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """Where one attempt goes."""

    number: int
    provider: str  # gen_ai.provider.name
    backend: str
    venue: str
    replica: str | None
    server: ServerAddress | None = None  # `server.address` and `server.port`, when known


def server_of(url: str | None) -> ServerAddress | None:
    """The host and port an upstream URL names (the scheme's port when it names none); None
    for no URL or one without a host. Made once per backend, when the model table is built."""
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return ServerAddress(parts.hostname, port)


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt, or the whole call, ended: counts and outcome, text only by opt-in."""

    status: str  # ok | error | client_disconnect
    error_type: str | None
    usage: Usage
    cost_usd: float
    duration_s: float
    ttft_s: float | None = None
    response_model: str | None = None
    finish_reason: str | None = None
    content: Content | None = None  # the prompt and reply: tenants who opted in, only
    # what only this operation reports (an embedding's `gen_ai.embeddings.dimension.count`)
    attributes: Mapping[str, AttributeValue] | None = None


def parent_context(client: ClientTrace | None) -> object | None:
    """The OTel context of the client's span, or None (a new trace)."""
    if client is None:
        return None
    carrier = {"traceparent": client.traceparent}
    if client.tracestate:
        carrier["tracestate"] = client.tracestate
    return W3C.extract(carrier)


def _usage_attributes(u: Usage) -> dict[str, AttributeValue]:
    return {
        ga.GEN_AI_USAGE_INPUT_TOKENS: u.prompt_tokens,  # cached ones included, as the convention asks
        ga.GEN_AI_USAGE_OUTPUT_TOKENS: u.output_tokens,
        ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: u.cache_read_tokens,
        ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: u.cache_write_tokens,
    }


def _end(span: Span, end: Ending, start_ns: int) -> None:
    attrs = _usage_attributes(end.usage)
    attrs["lantern.cost_usd"] = end.cost_usd
    attrs["lantern.status"] = end.status
    if end.response_model is not None:
        attrs[ga.GEN_AI_RESPONSE_MODEL] = end.response_model
    if end.finish_reason is not None:
        attrs[ga.GEN_AI_RESPONSE_FINISH_REASONS] = (end.finish_reason,)
    if end.ttft_s is not None:
        attrs[ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = end.ttft_s
    if (content := end.content) is not None:
        attrs[ga.GEN_AI_INPUT_MESSAGES] = content.input_messages
        attrs[ga.GEN_AI_OUTPUT_MESSAGES] = content.output_messages
        if content.system is not None:
            attrs[ga.GEN_AI_SYSTEM_INSTRUCTIONS] = content.system
    if end.attributes:
        attrs.update(end.attributes)
    if end.status != "ok":
        attrs[ERROR_TYPE] = end.error_type or end.status
        span.set_status(Status(StatusCode.ERROR, end.error_type or end.status))
    span.set_attributes(attrs)
    span.end(end_time=start_ns + int(end.duration_s * 1e9))


class CallTrace:
    """The server span of one call and its attempts' client spans, ended as they finish."""

    def __init__(
        self, tracer: Tracer, facts: CallFacts, client: ClientTrace | None, start_ns: int
    ) -> None:
        self.tracer = tracer
        self.facts = facts
        self.start_ns = start_ns
        # a call that named no model: the operation alone, as the conventions name it then
        self.name = f"{facts.operation} {facts.model}" if facts.model else facts.operation
        self.server = tracer.start_span(
            self.name,
            context=parent_context(client),  # type: ignore[arg-type]
            kind=SpanKind.SERVER,
            start_time=start_ns,
            attributes=self._request_attributes(),
        )
        known = {
            ga.GEN_AI_CONVERSATION_ID: facts.conversation_id,
            "lantern.tenant": facts.tenant,
            "lantern.request_id": facts.request_id,
            "lantern.door": facts.door,
            "lantern.cache": facts.cache,
        }
        # what a call does not have (no session, refused before its ledger row) is left out,
        # not recorded as "": an empty `gen_ai.conversation.id` would group unrelated calls
        self.server.set_attributes({k: v for k, v in known.items() if v})
        self._attempts: dict[int, tuple[Span, int]] = {}

    @property
    def trace_id(self) -> str:
        return format(self.server.get_span_context().trace_id, "032x")

    def _request_attributes(self) -> dict[str, AttributeValue]:
        f = self.facts
        attrs: dict[str, AttributeValue] = {ga.GEN_AI_OPERATION_NAME: f.operation}
        if f.model:
            attrs[ga.GEN_AI_REQUEST_MODEL] = f.model
        if f.max_tokens is not None:
            attrs[ga.GEN_AI_REQUEST_MAX_TOKENS] = f.max_tokens
        if f.stream is not None:
            attrs[ga.GEN_AI_REQUEST_STREAM] = f.stream
        return attrs

    def begin_attempt(self, a: AttemptFacts, now_ns: int) -> dict[str, str]:
        """Start the attempt's client span; the headers that carry its context upstream."""
        attrs = self._request_attributes()
        attrs[ga.GEN_AI_PROVIDER_NAME] = a.provider
        if self.facts.conversation_id:
            attrs[ga.GEN_AI_CONVERSATION_ID] = self.facts.conversation_id
        attrs["lantern.tenant"] = self.facts.tenant  # a tenant's spans are found by it alone
        attrs["lantern.backend"] = a.backend
        attrs["lantern.venue"] = a.venue
        attrs["lantern.attempt"] = a.number
        if a.replica is not None:
            attrs["lantern.replica"] = a.replica
        if a.server is not None:
            attrs[SERVER_ADDRESS] = a.server.address
            attrs[SERVER_PORT] = a.server.port
        span = self.tracer.start_span(
            self.name,
            context=set_span_in_context(self.server),
            kind=SpanKind.CLIENT,
            start_time=now_ns,
            attributes=attrs,
        )
        self._attempts[a.number] = (span, now_ns)
        self.server.set_attributes(
            {ga.GEN_AI_PROVIDER_NAME: a.provider, "lantern.backend": a.backend}
        )
        headers: dict[str, str] = {}
        W3C.inject(headers, context=set_span_in_context(span))
        return headers

    def end_attempt(self, number: int, end: Ending) -> None:
        found = self._attempts.pop(number, None)
        if found is not None:
            _end(found[0], end, found[1])

    def end(self, end: Ending) -> None:
        """End the server span with the call's outcome (its last attempt's, or the failure)."""
        for number in list(self._attempts):  # never begun upstream, or not told: close them
            self.end_attempt(number, Ending("error", end.error_type, Usage(), 0.0, 0.0))
        _end(self.server, end, self.start_ns)
