"""The span of a door call that runs no inference: Anthropic's `count_tokens`, the Responses
door's stored-response reads and deletes, MCP's `tools/list`. Named and attributed as the GenAI
(or MCP) conventions say, child of the client's `traceparent`; built only while tracing, and
only when the call ends (it has no child span), so every attribute is there at creation.
Never the prompt, a stored reply's text or a tool's definition.
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
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from gateway.telemetry.traces import ClientTrace, parent_context

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


class OperationTrace:
    """One door call's server span, made when `end` is told how the call went."""

    __slots__ = ("client", "door", "start_ns", "tenant", "tracer")

    def __init__(
        self, tracer: Tracer, tenant: str, door: str, client: ClientTrace | None, start_ns: int
    ) -> None:
        self.tracer = tracer
        self.tenant = tenant
        self.door = door
        self.client = client
        self.start_ns = start_ns

    def end(self, op: Operation) -> None:
        attrs = dict(op.attributes)
        attrs["lantern.tenant"] = self.tenant
        attrs["lantern.door"] = self.door
        attrs["lantern.status"] = op.status or ("ok" if op.error_type is None else "error")
        if op.error_type is not None:
            attrs[ERROR_TYPE] = op.error_type
        span = self.tracer.start_span(
            op.name,
            context=parent_context(self.client),  # type: ignore[arg-type]
            kind=SpanKind.SERVER,
            start_time=self.start_ns,
            attributes=attrs,
        )
        if op.error_type is not None:
            span.set_status(Status(StatusCode.ERROR, op.error_type))
        span.end()
