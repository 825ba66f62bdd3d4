"""The MCP door's part of lantern.yaml: `mcp:` (the door) and `mcp_servers:` (upstreams).

Credentials for upstream servers come from environment variables named here, read when the
door is built; a tenant's own key is never among them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import Field

from gateway.backend_settings import Section
from policies.mcp import SERVER_NAME


class McpServerSettings(Section):
    """One upstream MCP server (Streamable HTTP) that policies may grant to tenants."""

    name: str = Field(pattern=SERVER_NAME)  # its tools are served as `<name>__<tool>`
    url: str = Field(pattern=r"^https?://")
    # header name -> environment variable holding its value (e.g. Authorization: ORDERS_AUTH)
    headers_env: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0)  # one call, connecting included
    refresh_s: float = Field(default=60.0, gt=0)  # how often its tool list is read again

    def headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers Lantern sends it; a variable that is unset sends no header."""
        env = os.environ if environ is None else environ
        return {name: env[var] for name, var in self.headers_env.items() if var in env}


class McpSettings(Section):
    """The door itself."""

    # browsers send Origin: a request carrying one not listed here is refused (403); clients
    # that are not browsers send none
    allowed_origins: tuple[str, ...] = ()
    session_idle_s: float = Field(default=1800.0, gt=0)  # a session unused this long ends
    max_sessions: int = Field(default=10_000, gt=0)  # per gateway process (listen streams too)
    # handshake-era sessions one tenant may hold open in one gateway process
    max_sessions_per_tenant: int = Field(default=1_000, gt=0)
    # `subscriptions/listen` streams one tenant may hold open in one gateway process
    max_listens_per_tenant: int = Field(default=32, gt=0)
    # events a handshake-era session keeps for a client resuming a stream (`Last-Event-ID`), its
    # newest; 0: streams are not resumable
    replay_events_per_session: int = Field(default=100, ge=0)
    # bytes of kept events one tenant's sessions hold in one gateway process (its oldest go first)
    replay_bytes_per_tenant: int = Field(default=8 * 1024 * 1024, gt=0)
    # how often tenants with open sessions are checked for a changed tool list, and keys with
    # open sessions or streams for whether they may still call
    change_poll_s: float = Field(default=1.0, gt=0)
