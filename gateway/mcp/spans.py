"""The spans of the MCP methods that list no tool and call none (`initialize`, `ping`,
`subscriptions/listen`), named and attributed as MCP's conventions name a server's span of a
method, in the client's trace. Made only while tracing: otherwise a message costs one lookup.
`tools/list` and `tools/call` make their own (server.py, calls.py), with what they add.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.exceptions import MCPError
from opentelemetry.semconv._incubating.attributes.jsonrpc_attributes import JSONRPC_REQUEST_ID
from opentelemetry.semconv._incubating.attributes.mcp_attributes import (
    MCP_METHOD_NAME,
    MCP_SESSION_ID,
)
from opentelemetry.util.types import AttributeValue

from gateway.mcp.calls import CALLER_SCOPE_KEY, McpCaller, meta_trace
from gateway.telemetry import Telemetry
from gateway.telemetry.operations import Operation

DOOR = "mcp"  # `lantern.door` of its spans
TRACED_METHODS = frozenset({"initialize", "ping", "subscriptions/listen"})
# the id of the session an opening request (`initialize`) opens: it names none itself
OPENED_SESSION_SCOPE_KEY = "lantern.mcp.opened_session"


def method_ended(
    method: str,
    request_id: str | int | None,
    session_id: str,
    error_type: str | None = None,
    status: str | None = None,
) -> Operation:
    attrs: dict[str, AttributeValue] = {MCP_METHOD_NAME: method}
    if request_id is not None:
        attrs[JSONRPC_REQUEST_ID] = str(request_id)
    if session_id:
        attrs[MCP_SESSION_ID] = session_id
    return Operation(method, attrs, error_type, status)


def session_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The message's MCP session: the one it names, else the one its request opened; "" on the
    2026-07-28 wire, which has none."""
    if ctx.request is None:
        return ""
    named = ctx.request.headers.get(MCP_SESSION_ID_HEADER)
    opened = ctx.request.scope.get(OPENED_SESSION_SCOPE_KEY)
    return named or (opened if isinstance(opened, str) else "")


class MethodSpans:
    """Server middleware (the SDK's `Server.middleware`): it sees `initialize` too, which no
    handler of ours does."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method not in TRACED_METHODS or not self._telemetry.is_tracing:
            return await call_next(ctx)
        caller = None if ctx.request is None else ctx.request.scope.get(CALLER_SCOPE_KEY)
        if not isinstance(caller, McpCaller):  # not through the door: the handler refuses it
            return await call_next(ctx)
        client = caller.trace or meta_trace(ctx.meta)
        trace = self._telemetry.trace_operation(caller.policy.tenant, DOOR, client)
        session = session_of(ctx)
        try:
            result = await call_next(ctx)
        except asyncio.CancelledError:  # the client left (how a listen stream usually ends)
            trace.end(method_ended(ctx.method, ctx.request_id, session, None, "cancelled"))
            raise
        except MCPError as exc:  # the conventions' `error.type`: the JSON-RPC error code
            trace.end(method_ended(ctx.method, ctx.request_id, session, str(exc.error.code)))
            raise
        except Exception as exc:
            trace.end(method_ended(ctx.method, ctx.request_id, session, type(exc).__name__))
            raise
        trace.end(method_ended(ctx.method, ctx.request_id, session))
        return result
