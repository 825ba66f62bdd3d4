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

from gateway.mcp.calls import McpCaller, ToolCalls
from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.changes import ListChanges

CALLER_SCOPE_KEY = "lantern.mcp.caller"
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
) -> ToolServer:
    """`listen`: serves `subscriptions/listen` (the 2026-07-28 wire's change events)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        caller = caller_of(ctx)
        listing, digest = await catalogue.listing_and_digest(caller.policy)
        session_id = ctx.request.headers.get(MCP_SESSION_ID_HEADER) if ctx.request else None
        if session_id:  # a handshake-era session, with a stream to announce changes on
            changes.listed(caller.policy.tenant, session_id, ctx.session, digest)
        return ListToolsResult(tools=[tool.definition for tool in listing])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        arguments = params.arguments or {}
        return await calls.call(caller_of(ctx), ctx.request_id, params.name, arguments, params.meta)

    return ToolServer(
        "lantern",
        version=VERSION,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=listen,
    )
