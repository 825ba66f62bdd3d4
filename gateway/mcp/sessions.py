"""Handshake-era sessions held per tenant: at most `mcp.max_sessions_per_tenant` open in one
gateway process (and `mcp.max_sessions` in all), so one tenant opening sessions in a loop never
leaves another none. A session is held from the moment the SDK admits it until it is discarded
(the client's DELETE, its idle timeout, a failed opening request, its key no longer able to
call, the gateway stopping).

The SDK's session manager says neither when a session is admitted nor when it goes, but it does
both in one method each (`_admit_session`, `_discard_session`, mcp 2.3.0; pyproject.toml pins
that release, and tests/mcp/test_session_manager_pin.py fails on another until reviewed):
this subclass counts there, and keeps whose key each session is. The opening request is served
in a third (`_serve_opening_request`), where its scope learns the id of the session it opens
(its `initialize` span names it). The door refuses an opening request of a tenant at its limit
before the SDK reads it (429); the count at admission, under the SDK's session lock, is what
holds when two arrive together (the later one gets the SDK's 503).

Each session's transport gets an event store of its own (`ReplayEvents.open`): the SDK's
manager hands every transport it makes its `event_store`, whose stream ids (`_GET_stream`, the
request ids) name no session, so one store shared by all would mix them. The store is set for
the one synchronous call that makes the transport, and the session's events are forgotten where
it is discarded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from gateway.mcp.replay import ReplayEvents
from gateway.mcp.spans import OPENED_SESSION_SCOPE_KEY


@dataclass(frozen=True, slots=True)
class _Held:
    tenant: str
    key_id: str
    transport: StreamableHTTPServerTransport


class TenantSessionManager(StreamableHTTPSessionManager):
    def __init__(
        self,
        *args: Any,
        max_sessions_per_tenant: int,
        replay: ReplayEvents | None = None,
        on_discard: Callable[[str, str], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """`replay`: each session's events kept for a client resuming a stream; None: streams
        are not resumable. `on_discard(tenant, session_id)`: told of each session that goes,
        so what is kept for it goes too."""
        super().__init__(*args, **kwargs)
        self.max_sessions_per_tenant = max_sessions_per_tenant
        self._replay = replay
        self._on_discard = on_discard
        self._open: dict[str, int] = {}  # tenant -> sessions held
        self._held: dict[str, _Held] = {}  # session id -> whose it is

    def open_sessions(self, tenant: str) -> int:
        return self._open.get(tenant, 0)

    def keys(self) -> set[tuple[str, str]]:
        """The (tenant, key id) pairs holding a session."""
        return {(held.tenant, held.key_id) for held in self._held.values()}

    async def end_key(self, tenant: str, key_id: str) -> None:
        """The key may no longer call: its sessions end, as at the client's DELETE (their GET
        streams close; a request naming one is answered 404)."""
        ended = [
            (sid, h) for sid, h in self._held.items() if (h.tenant, h.key_id) == (tenant, key_id)
        ]
        for session_id, held in ended:
            await self._discard_session(session_id, held.transport)

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        # the door names the tenant as the client and the key as the subject
        tenant = "" if requestor is None else requestor["client_id"]
        key_id = (None if requestor is None else requestor["subject"]) or ""
        if self._open.get(tenant, 0) >= self.max_sessions_per_tenant:
            return None  # the SDK answers 503, as at its own limit
        events = None if self._replay is None else self._replay.open(tenant)
        self.event_store = events  # the transport made now keeps this session's events only
        try:
            transport = super()._admit_session(requestor)
        finally:
            self.event_store = None
        if transport is not None and transport.mcp_session_id is not None:
            self._held[transport.mcp_session_id] = _Held(tenant, key_id, transport)
            self._open[tenant] = self._open.get(tenant, 0) + 1
            if self._replay is not None and events is not None:
                self._replay.admitted(events, transport.mcp_session_id)
        return transport

    async def _serve_opening_request(
        self,
        http_transport: StreamableHTTPServerTransport,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """The opening request carries the id of the session it opens (its span names it)."""
        scope = {**scope, OPENED_SESSION_SCOPE_KEY: http_transport.mcp_session_id}
        await super()._serve_opening_request(http_transport, scope, receive, send)

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        held = self._held.pop(session_id, None)  # discarded more than once: counted once
        if self._replay is not None:
            self._replay.forget(session_id)
        if held is not None:
            left = self._open[held.tenant] - 1
            if left:
                self._open[held.tenant] = left
            else:
                del self._open[held.tenant]
            if self._on_discard is not None:
                self._on_discard(held.tenant, session_id)
        await super()._discard_session(session_id, transport)
