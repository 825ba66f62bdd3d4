"""The MCP server behind the door (the SDK's low-level `Server`): `tools/list`, `tools/call` and
`subscriptions/listen` answered per tenant, from the caller the door put on the HTTP request
that carried the message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from gateway.mcp.calls import CALLER_SCOPE_KEY, McpCaller, ToolCalls, meta_trace
from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.changes import ListChanges
from gateway.mcp.spans import DOOR, MethodSpans
from gateway.telemetry import Telemetry
from gateway.telemetry.operations import tools_listed

VERSION = "0.1.0"


class ToolServer(Server[Any]):
    """Announces `tools.listChanged` (the SDK's session manager asks for the default options)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def caller_of(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    caller = None if ctx.request is None else ctx.request.scope.get(CALLER_SCOPE_KEY)
    if not isinstance(caller, McpCaller):  # every request passes the door first
        raise MCPError(INVALID_REQUEST, "unauthenticated")
    return caller


ListenHandlerFn = Callable[
    [ServerRequestContext[Any, Any], SubscriptionsListenRequestParams],
    Awaitable[SubscriptionsListenResult],
]


def build_server(
    catalogue: ToolCatalogue,
    calls: ToolCalls,
    changes: ListChanges,
    listen: ListenHandlerFn,
    telemetry: Telemetry,
) -> ToolServer:
    """`listen`: serves `subscriptions/listen` (the 2026-07-28 wire's change events);
    `telemetry` traces each `tools/list`, `initialize`, `ping` and `subscriptions/listen`
    (while tracing)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        caller = caller_of(ctx)
        session_id = ctx.request.headers.get(MCP_SESSION_ID_HEADER) if ctx.request else None
        trace = None
        if telemetry.is_tracing:  # the span of the listing, in the client's trace
            client = caller.trace or meta_trace(None if params is None else params.meta)
            trace = telemetry.trace_operation(caller.policy.tenant, DOOR, client)
        try:
            listing, digest = await catalogue.listing_and_digest(caller.policy)
        except Exception as exc:
            if trace is not None:
                trace.end(tools_listed(ctx.request_id, session_id or "", None, type(exc).__name__))
            raise
        if session_id:  # a handshake-era session, with a stream to announce changes on
            changes.listed(caller.policy.tenant, session_id, ctx.session, digest)
        if trace is not None:
            trace.end(tools_listed(ctx.request_id, session_id or "", len(listing)))
        return ListToolsResult(tools=[tool.definition for tool in listing])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        arguments = params.arguments or {}
        return await calls.call(caller_of(ctx), ctx.request_id, params.name, arguments, params.meta)

    server = ToolServer(
        "lantern",
        version=VERSION,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=listen,
    )
    server.middleware.append(MethodSpans(telemetry))
    return server
