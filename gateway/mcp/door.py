"""The `/mcp` door: the checks every HTTP request passes before the SDK reads a byte of its
body (Origin, then the tenant's API key), then the SDK's Streamable HTTP session manager.

The session manager binds each session to the (tenant, key) that opened it: another key
presenting its id is answered as if the session did not exist (404). A session's GET stream is
held by its key (`KeyStreams`): it ends when the key may no longer call.
"""

from __future__ import annotations

import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.errors import AuthenticationFailed
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.trace_context import client_trace
from gateway.mcp.calls import McpCaller
from gateway.mcp.key_watch import KeyStreams
from gateway.mcp.server import CALLER_SCOPE_KEY
from gateway.telemetry import Telemetry


def _refusal(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """A JSON-RPC error with no id (no message was read), as the SDK's own refusals."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


class McpDoor:
    """ASGI app for `/mcp`."""

    def __init__(
        self,
        manager: StreamableHTTPSessionManager,
        keys: KeyLookup,
        allowed_origins: tuple[str, ...],
        telemetry: Telemetry,
        streams: KeyStreams,
    ) -> None:
        self._telemetry = telemetry
        self._streams = streams
        self._manager = manager
        self._keys = keys
        self._origins = frozenset(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and origin not in self._origins:
            # the MCP spec's defence against DNS rebinding: a browser page of another origin
            await _refusal(403, f"origin {origin!r} is not allowed")(scope, receive, send)
            return
        try:
            found = authenticate(headers, self._keys)
        except AuthenticationFailed as exc:
            reply = _refusal(401, str(exc), {"WWW-Authenticate": 'Bearer realm="lantern"'})
            await reply(scope, receive, send)
            return
        tenant, key_id = found.tenant.tenant, found.key_id
        owner = AccessToken(token="-", client_id=tenant, subject=key_id, scopes=[])
        mcp_session = headers.get(MCP_SESSION_ID_HEADER) or ""
        named = headers.get("x-session-id") or headers.get("x-lantern-session") or ""
        trace = client_trace(headers) if self._telemetry.is_tracing else None
        caller = McpCaller(found.tenant, key_id, mcp_session or named, named or mcp_session, trace)
        scope = {**scope, "user": AuthenticatedUser(owner), CALLER_SCOPE_KEY: caller}
        if scope["method"] == "GET":  # a session's stream: open until the client or its key ends
            key = (tenant, key_id)
            await self._streams.serve(key, self._manager.handle_request, scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)
