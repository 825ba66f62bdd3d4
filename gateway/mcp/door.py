"""The `/mcp` door: the checks every HTTP request passes before the SDK reads a byte of its
body (Origin, then the tenant's API key), then the SDK's Streamable HTTP session manager.

The session manager binds each session to the (tenant, key) that opened it: another key
presenting its id is answered as if the session did not exist (404).
"""

from __future__ import annotations

import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.core.identifiers import check_identifier
from gateway.errors import AuthenticationFailed, RequestRejected
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.trace_context import client_trace
from gateway.mcp.calls import McpCaller
from gateway.mcp.errors import LIMITED
from gateway.mcp.server import CALLER_SCOPE_KEY
from gateway.mcp.sessions import TenantSessionManager
from gateway.telemetry import Telemetry


def _refusal(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    code: int = INVALID_REQUEST,
    data: dict[str, object] | None = None,
) -> Response:
    """A JSON-RPC error with no id (no message was read), as the SDK's own refusals."""
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _may_open_a_session(headers: Headers) -> bool:
    """Whether the SDK would take this request as a session's first (no session named, and a
    handshake-era protocol version or none): the 2026-07-28 wire opens none."""
    if MCP_SESSION_ID_HEADER in headers:
        return False
    version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _unusable_session_header(headers: Headers) -> Response | None:
    """A 400 naming the agent-session header a ledger row could not store (too long, or not
    printable ASCII), as the model doors refuse it; None when each is usable."""
    for name in ("x-session-id", "x-lantern-session"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            check_identifier(name, value)
        except RequestRejected as exc:
            return _refusal(400, str(exc), data={"rule": exc.rule, "field": exc.field})
    return None


class McpDoor:
    """ASGI app for `/mcp`."""

    def __init__(
        self,
        manager: TenantSessionManager,
        keys: KeyLookup,
        allowed_origins: tuple[str, ...],
        telemetry: Telemetry,
    ) -> None:
        self._telemetry = telemetry
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
        refused = _unusable_session_header(headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
        tenant, key_id = found.tenant.tenant, found.key_id
        held, limit = self._manager.open_sessions(tenant), self._manager.max_sessions_per_tenant
        if held >= limit and _may_open_a_session(headers):
            message = (
                f"max_sessions_per_tenant reached: this tenant holds {held} MCP sessions here; "
                "end one (DELETE) or let one idle out"
            )
            data: dict[str, object] = {"rule": "max_sessions_per_tenant", "limit": limit}
            await _refusal(429, message, None, LIMITED, data)(scope, receive, send)
            return
        owner = AccessToken(token="-", client_id=tenant, subject=key_id, scopes=[])
        mcp_session = headers.get(MCP_SESSION_ID_HEADER) or ""
        named = headers.get("x-session-id") or headers.get("x-lantern-session") or ""
        trace = client_trace(headers) if self._telemetry.is_tracing else None
        caller = McpCaller(found.tenant, key_id, mcp_session or named, named or mcp_session, trace)
        scope = {**scope, "user": AuthenticatedUser(owner), CALLER_SCOPE_KEY: caller}
        await self._manager.handle_request(scope, receive, send)
