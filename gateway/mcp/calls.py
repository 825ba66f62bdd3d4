"""One `tools/call`, start to end: the tool as the tenant's policy stands now, the tenant's
limits, the sandbox or the upstream server, and its ledger row whatever the outcome.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from gateway.mcp.accounting import ToolCall, ToolCallLedger
from gateway.mcp.catalogue import ServedTool, ToolCatalogue
from gateway.mcp.errors import (
    McpDoorError,
    ToolCallsLimited,
    ToolLimitsUnavailable,
    UnknownTool,
    error_kind,
    mcp_error,
)
from gateway.mcp.limits import ToolCallLimiter
from gateway.mcp.sandbox_tools import SandboxTools
from gateway.mcp.upstream import UpstreamServers
from policies.model import TenantPolicy
from sandbox.errors import SandboxError
from sandbox.fingerprint import derive_key


@dataclass(frozen=True, slots=True)
class McpCaller:
    """Who sent this MCP message: authenticated by the door on this very HTTP request."""

    policy: TenantPolicy
    key_id: str
    session_id: str  # Mcp-Session-Id, else the client's x-session-id, else "" (idempotency)
    # the agent session the client names (x-session-id, else the MCP session): the ledger's
    # session and the `calls_per_session` counter its model calls share
    agent_session: str = ""


def idempotency_key(session_id: str, request_id: str | int | None) -> str:
    """A client's retry of a JSON-RPC request (same session, same id) replays the first run;
    without a session every call is its own run."""
    if session_id and request_id is not None:
        return derive_key(session_id, f"mcp:{request_id}")
    return f"mcp-{uuid.uuid4().hex}"


class ToolCalls:
    def __init__(
        self,
        catalogue: ToolCatalogue,
        sandbox: SandboxTools,
        upstreams: UpstreamServers,
        limiter: ToolCallLimiter,
        ledger: ToolCallLedger,
    ) -> None:
        self._catalogue = catalogue
        self._sandbox = sandbox
        self._upstreams = upstreams
        self._limiter = limiter
        self._ledger = ledger

    async def call(
        self,
        caller: McpCaller,
        request_id: str | int | None,
        name: str,
        arguments: dict[str, Any],
    ) -> CallToolResult:
        """The result, or an `MCPError` for the client; one ledger row either way."""
        policy = caller.policy
        started = self._ledger.started()
        session = caller.agent_session
        row = ToolCall(policy.tenant, caller.key_id, session, name, "")
        try:
            tool = await self._catalogue.find(policy, name)
            row = ToolCall(policy.tenant, caller.key_id, session, name, tool.server)
            async with self._limiter.slot(policy.tenant, policy.limits, session):
                result = await self._dispatch(caller, request_id, tool, arguments)
        except (McpDoorError, SandboxError) as exc:
            status = "rejected" if _refused(exc) else "error"
            self._ledger.record(row, started, status, error_kind(exc))
            raise mcp_error(exc) from exc
        except MCPError as exc:  # the upstream's own JSON-RPC error, relayed
            self._ledger.record(row, started, "error", error_kind(exc))
            raise
        self._ledger.record(row, started, "ok", "tool_error" if result.is_error else None)
        return result

    async def _dispatch(
        self,
        caller: McpCaller,
        request_id: str | int | None,
        tool: ServedTool,
        arguments: dict[str, Any],
    ) -> CallToolResult:
        if not tool.server:
            key = idempotency_key(caller.session_id, request_id)
            return await self._sandbox.call(
                caller.policy, caller.key_id, tool.source_name, arguments, key
            )
        return await self._upstreams.call(tool.server, tool.source_name, arguments)


def _refused(exc: McpDoorError | SandboxError) -> bool:
    """Refused before anything ran (the ledger's `rejected`)."""
    return isinstance(exc, UnknownTool | ToolCallsLimited | ToolLimitsUnavailable) or (
        isinstance(exc, SandboxError) and exc.status_code in (400, 403, 409, 422, 429)
    )
