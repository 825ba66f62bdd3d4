"""Handshake-era sessions held per tenant: at most `mcp.max_sessions_per_tenant` open in one
gateway process (and `mcp.max_sessions` in all), so one tenant opening sessions in a loop never
leaves another none. A session is held from the moment the SDK admits it until it is discarded
(the client's DELETE, its idle timeout, a failed opening request, the gateway stopping).

The SDK's session manager says neither when a session is admitted nor when it goes, but it does
both in one method each (`_admit_session`, `_discard_session`, mcp 2.3.0; pyproject.toml pins
that release, and tests/mcp/test_session_manager_pin.py fails on another until reviewed):
this subclass counts there. The door refuses an opening request of a tenant at its limit before
the SDK reads it (429); the count at admission, under the SDK's session lock, is what holds
when two arrive together (the later one gets the SDK's 503).
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class TenantSessionManager(StreamableHTTPSessionManager):
    def __init__(self, *args: Any, max_sessions_per_tenant: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_sessions_per_tenant = max_sessions_per_tenant
        self._open: dict[str, int] = {}  # tenant -> sessions held
        self._tenant_of: dict[str, str] = {}  # session id -> its tenant

    def open_sessions(self, tenant: str) -> int:
        return self._open.get(tenant, 0)

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        tenant = "" if requestor is None else requestor["client_id"]  # the door sets the tenant
        if self._open.get(tenant, 0) >= self.max_sessions_per_tenant:
            return None  # the SDK answers 503, as at its own limit
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._tenant_of[transport.mcp_session_id] = tenant
            self._open[tenant] = self._open.get(tenant, 0) + 1
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        tenant = self._tenant_of.pop(session_id, None)  # discarded more than once: counted once
        if tenant is not None:
            left = self._open[tenant] - 1
            if left:
                self._open[tenant] = left
            else:
                del self._open[tenant]
        await super()._discard_session(session_id, transport)
