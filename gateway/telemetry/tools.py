"""The span of one tool run or MCP tool call, `execute_tool {tool}` in the GenAI conventions,
child of the client's `traceparent`; for a tool of an upstream MCP server, a client span under
it whose context goes upstream. Built only while tracing; never the arguments or the output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.semconv._incubating.attributes.jsonrpc_attributes import JSONRPC_REQUEST_ID
from opentelemetry.semconv._incubating.attributes.mcp_attributes import (
    MCP_METHOD_NAME,
    McpMethodNameValues,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.util.types import AttributeValue

from gateway.telemetry.traces import W3C, ClientTrace, parent_context

EXECUTE_TOOL = ga.GenAiOperationNameValues.EXECUTE_TOOL.value
TOOLS_CALL = McpMethodNameValues.TOOLS_CALL.value


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What the gateway knows of a tool call once its tool is named."""

    tool: str  # as the client named it
    tenant: str
    door: str  # tools | mcp
    call_id: str | None = None  # gen_ai.tool.call.id: the model's tool call, when the client says
    session_id: str = ""  # the agent session (gen_ai.conversation.id)
    jsonrpc_id: str | None = None  # the MCP request's JSON-RPC id


class ToolTrace:
    """The call's `execute_tool` span and, while an upstream MCP server answers, its client
    span; `end` closes both."""

    def __init__(
        self, tracer: Tracer, facts: ToolFacts, client: ClientTrace | None, start_ns: int
    ) -> None:
        self.tracer = tracer
        self.tenant = facts.tenant
        attrs: dict[str, AttributeValue] = {
            ga.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            ga.GEN_AI_TOOL_NAME: facts.tool,
            "lantern.tenant": facts.tenant,
            "lantern.door": facts.door,
        }
        if facts.call_id:
            attrs[ga.GEN_AI_TOOL_CALL_ID] = facts.call_id
        if facts.session_id:
            attrs[ga.GEN_AI_CONVERSATION_ID] = facts.session_id
        if facts.door == "mcp":
            attrs[MCP_METHOD_NAME] = TOOLS_CALL
            if facts.jsonrpc_id is not None:
                attrs[JSONRPC_REQUEST_ID] = facts.jsonrpc_id
        self.span = tracer.start_span(
            f"{EXECUTE_TOOL} {facts.tool}",
            context=parent_context(client),  # type: ignore[arg-type]
            kind=SpanKind.SERVER,
            start_time=start_ns,
            attributes=attrs,
        )
        self._upstream: Span | None = None

    def begin_upstream(self, server: str, tool: str) -> dict[str, str]:
        """Start the client span of a `tools/call` to an upstream MCP server (named as MCP's
        conventions name it); the W3C headers that carry its context there."""
        self.span.set_attribute("lantern.mcp.server", server)
        self._upstream = span = self.tracer.start_span(
            f"{TOOLS_CALL} {tool}",
            context=set_span_in_context(self.span),
            kind=SpanKind.CLIENT,
            attributes={
                MCP_METHOD_NAME: TOOLS_CALL,
                ga.GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
                ga.GEN_AI_TOOL_NAME: tool,
                "lantern.mcp.server": server,
                "lantern.tenant": self.tenant,
            },
        )
        headers: dict[str, str] = {}
        W3C.inject(headers, context=set_span_in_context(span))
        return headers

    def end(self, status: str, error_type: str | None = None) -> None:
        """`status`: the run's or call's outcome as the ledger says it; `error_type` when it
        did not succeed (the tool's own failure included)."""
        now = time.time_ns()
        for span in (self._upstream, self.span):
            if span is None:
                continue
            span.set_attribute("lantern.status", status)
            if error_type is not None:
                span.set_attribute(ERROR_TYPE, error_type)
                span.set_status(Status(StatusCode.ERROR, error_type))
            span.end(end_time=now)
        self._upstream = None
