"""The span of a door call that runs no inference: Anthropic's `count_tokens`, the Responses
door's stored-response reads and deletes, MCP's `tools/list`. Named and attributed as the GenAI
(or MCP) conventions say, child of the client's `traceparent`; built only while tracing, and
when the call ends (every attribute there at creation), unless an upstream call (the
provider's count) needs it as a parent first. Never the prompt, a stored reply's text or a
tool's definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.attributes.jsonrpc_attributes import JSONRPC_REQUEST_ID
from opentelemetry.semconv._incubating.attributes.mcp_attributes import (
    MCP_METHOD_NAME,
    MCP_SESSION_ID,
    McpMethodNameValues,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.util.types import AttributeValue

from gateway.ports import ServerAddress
from gateway.telemetry.traces import W3C, ClientTrace, parent_context

# `gen_ai.operation.name` values the conventions' list lacks (a custom value MAY be used):
# counting a prompt, and a stored response's deletion and input items
COUNT_TOKENS = "count_tokens"
DELETE_RESPONSE = "delete_response"
LIST_INPUT_ITEMS = "list_input_items"
# the conventions' operation for reading back a stored response without inference
FETCH_RESPONSE = "fetch_response"
TOOLS_LIST = McpMethodNameValues.TOOLS_LIST.value
# the API flavour a Responses read answers in (`gen_ai.provider.name` is the discriminator of
# the telemetry's format, which for a stored response is OpenAI's Responses object)
OPENAI = ga.GenAiProviderNameValues.OPENAI.value


@dataclass(frozen=True, slots=True)
class Operation:
    """How a door call that runs no inference ended."""

    name: str  # the span's name
    attributes: Mapping[str, AttributeValue]
    error_type: str | None = None  # None: it succeeded
    status: str | None = None  # `lantern.status`; None: `ok`, or `error` with an error type


def genai_name(operation: str, model: str | None) -> str:
    """`{gen_ai.operation.name} {gen_ai.request.model}`, the operation alone without a model."""
    return f"{operation} {model}" if model else operation


def unread(operation: str, error_type: str) -> Operation:
    """A model call refused before it named a model (its body did not parse, or broke a rule
    of its door): the operation alone names it, as it names any call without a model."""
    return Operation(operation, {ga.GEN_AI_OPERATION_NAME: operation}, error_type, "rejected")


def counted(
    model: str | None,
    provider: str | None,
    input_tokens: int | None,
    is_exact: bool | None,
    error_type: str | None = None,
) -> Operation:
    """A `count_tokens` call: the prompt's count is not usage (nothing was consumed), so it is
    `lantern.count.input_tokens`, never `gen_ai.usage.input_tokens`."""
    attrs: dict[str, AttributeValue] = {ga.GEN_AI_OPERATION_NAME: COUNT_TOKENS}
    if model:
        attrs[ga.GEN_AI_REQUEST_MODEL] = model
    if provider:
        attrs[ga.GEN_AI_PROVIDER_NAME] = provider
    if input_tokens is not None:
        attrs["lantern.count.input_tokens"] = input_tokens
    if is_exact is not None:
        attrs["lantern.count.is_exact"] = is_exact
    return Operation(genai_name(COUNT_TOKENS, model), attrs, error_type)


def counting_upstream(
    model: str, provider: str, backend: str, server: ServerAddress | None
) -> Operation:
    """The provider's count of a prompt, as the upstream call of a `count_tokens` door."""
    attrs: dict[str, AttributeValue] = {
        ga.GEN_AI_OPERATION_NAME: COUNT_TOKENS,
        ga.GEN_AI_REQUEST_MODEL: model,
        ga.GEN_AI_PROVIDER_NAME: provider,
        "lantern.backend": backend,
    }
    if server is not None:
        attrs[SERVER_ADDRESS] = server.address
        attrs[SERVER_PORT] = server.port
    return Operation(genai_name(COUNT_TOKENS, model), attrs)


def stored_response(
    operation: str,
    response_id: str | None,
    reply: Mapping[str, object] | None = None,
    error_type: str | None = None,
) -> Operation:
    """A read or deletion of a stored response; `reply`: the stored response, when read. Its
    usage was the original call's: never reported again."""
    attrs: dict[str, AttributeValue] = {
        ga.GEN_AI_OPERATION_NAME: operation,
        ga.GEN_AI_PROVIDER_NAME: OPENAI,
    }
    if response_id is not None:
        attrs[ga.GEN_AI_RESPONSE_ID] = response_id
    model = None if reply is None else reply.get("model")
    if isinstance(model, str) and model:
        attrs[ga.GEN_AI_RESPONSE_MODEL] = model
    else:
        model = None
    if reply is not None and (reason := finish_reason(reply)) is not None:
        attrs[ga.GEN_AI_RESPONSE_FINISH_REASONS] = (reason,)
    return Operation(genai_name(operation, model), attrs, error_type)


def finish_reason(reply: Mapping[str, object]) -> str | None:
    """How the stored response's generation ended, from its `status`: `completed` is the
    conventions' `stop`; `incomplete` names its `incomplete_details.reason` (e.g.
    `max_output_tokens`); `failed` and `cancelled` as they are; None while it is not over."""
    status = reply.get("status")
    if status == "completed":
        return "stop"
    if status == "incomplete":
        details = reply.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return reason if isinstance(reason, str) and reason else "incomplete"
    if status in ("failed", "cancelled"):
        return str(status)
    return None


def tools_listed(
    request_id: str | int | None,
    session_id: str,
    num_tools: int | None,
    error_type: str | None = None,
) -> Operation:
    """An MCP `tools/list`, named as MCP's conventions name a server's span of a method."""
    attrs: dict[str, AttributeValue] = {MCP_METHOD_NAME: TOOLS_LIST}
    if request_id is not None:
        attrs[JSONRPC_REQUEST_ID] = str(request_id)
    if session_id:
        attrs[MCP_SESSION_ID] = session_id
    if num_tools is not None:
        attrs["lantern.mcp.num_tools"] = num_tools
    return Operation(TOOLS_LIST, attrs, error_type)


class UpstreamSpan:
    """The client span of an upstream call a door makes (the provider's count of a prompt),
    child of the door's span; `headers` carry its context upstream. Used as a context manager,
    it ends with the type of the exception that left it, if one did."""

    __slots__ = ("headers", "span")

    def __init__(self, span: Span, headers: dict[str, str]) -> None:
        self.span = span
        self.headers = headers

    def __enter__(self) -> dict[str, str]:
        return self.headers

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.end(None if kind is None else kind.__name__)

    def end(self, error_type: str | None = None) -> None:
        self.span.set_attribute("lantern.status", "ok" if error_type is None else "error")
        if error_type is not None:
            self.span.set_attribute(ERROR_TYPE, error_type)
            self.span.set_status(Status(StatusCode.ERROR, error_type))
        self.span.end()


class OperationTrace:
    """One door call's server span, made when `end` is told how the call went (or when an
    upstream call needs it as a parent: `upstream`)."""

    __slots__ = ("client", "door", "server", "start_ns", "tenant", "tracer")

    def __init__(
        self, tracer: Tracer, tenant: str, door: str, client: ClientTrace | None, start_ns: int
    ) -> None:
        self.tracer = tracer
        self.tenant = tenant
        self.door = door
        self.client = client
        self.start_ns = start_ns
        self.server: Span | None = None  # begun early only for a child span

    def upstream(self, op: Operation) -> UpstreamSpan:
        """Begin the client span of the door's upstream call `op` (its name and request
        attributes), under the door's span, begun now with what is known so far."""
        if self.server is None:
            known = {ga.GEN_AI_OPERATION_NAME: op.attributes[ga.GEN_AI_OPERATION_NAME]}
            self.server = self._start(op.name, {**known, **self._own()})
        attrs = {**op.attributes, "lantern.tenant": self.tenant}
        span = self.tracer.start_span(
            op.name,
            context=set_span_in_context(self.server),
            kind=SpanKind.CLIENT,
            attributes=attrs,
        )
        headers: dict[str, str] = {}
        W3C.inject(headers, context=set_span_in_context(span))
        return UpstreamSpan(span, headers)

    def end(self, op: Operation) -> None:
        attrs = dict(op.attributes)
        attrs.update(self._own())
        attrs["lantern.status"] = op.status or ("ok" if op.error_type is None else "error")
        if op.error_type is not None:
            attrs[ERROR_TYPE] = op.error_type
        span = self.server
        if span is None:
            span = self._start(op.name, attrs)
        else:
            span.update_name(op.name)
            span.set_attributes(attrs)
        if op.error_type is not None:
            span.set_status(Status(StatusCode.ERROR, op.error_type))
        span.end()

    def _own(self) -> dict[str, AttributeValue]:
        return {"lantern.tenant": self.tenant, "lantern.door": self.door}

    def _start(self, name: str, attrs: Mapping[str, AttributeValue]) -> Span:
        return self.tracer.start_span(
            name,
            context=parent_context(self.client),  # type: ignore[arg-type]
            kind=SpanKind.SERVER,
            start_time=self.start_ns,
            attributes=attrs,
        )
