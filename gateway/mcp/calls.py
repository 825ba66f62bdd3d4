"""One `tools/call`, start to end: the tool as the tenant's policy stands now, the tenant's
limits, the sandbox or the upstream server, and its ledger row whatever the outcome.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, RequestParamsMeta

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
from gateway.telemetry import ClientTrace, Telemetry, ToolFacts, ToolTrace
from policies.model import TenantPolicy
from sandbox.errors import SandboxError
from sandbox.fingerprint import derive_key

CALLER_SCOPE_KEY = "lantern.mcp.caller"  # where the door puts the caller on the HTTP request


@dataclass(frozen=True, slots=True)
class McpCaller:
    """Who sent this MCP message: authenticated by the door on this very HTTP request."""

    policy: TenantPolicy
    key_id: str
    session_id: str  # Mcp-Session-Id, else the client's x-session-id, else "" (idempotency)
    # the agent session the client names (x-session-id, else the MCP session): the ledger's
    # session and the `calls_per_session` counter its model calls share
    agent_session: str = ""
    trace: ClientTrace | None = None  # the HTTP request's `traceparent`, read while tracing


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
        telemetry: Telemetry,
    ) -> None:
        self._telemetry = telemetry
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
        meta: RequestParamsMeta | None = None,
    ) -> CallToolResult:
        """The result, or an `MCPError` for the client; one ledger row (and, while tracing, one
        `execute_tool` span) either way."""
        policy = caller.policy
        started = self._ledger.started()
        session = caller.agent_session
        row = ToolCall(policy.tenant, caller.key_id, session, name, "")
        trace = self._trace(caller, request_id, name, meta) if self._telemetry.is_tracing else None
        try:
            tool = await self._catalogue.find(policy, name)
            row = ToolCall(policy.tenant, caller.key_id, session, name, tool.server)
            async with self._limiter.slot(policy.tenant, policy.limits, session):
                result = await self._dispatch(caller, request_id, tool, arguments, trace)
        except (McpDoorError, SandboxError) as exc:
            status = "rejected" if _refused(exc) else "error"
            self._ended(row, started, trace, status, error_kind(exc))
            raise mcp_error(exc) from exc
        except MCPError as exc:  # the upstream's own JSON-RPC error, relayed
            self._ended(row, started, trace, "error", error_kind(exc))
            raise
        except BaseException:  # cancelled (the client left): the row says so, the span ends
            self._ledger.record(row, started, "client_disconnect", None)
            if trace is not None:
                trace.end("cancelled", "cancelled")
            raise
        self._ended(row, started, trace, "ok", "tool_error" if result.is_error else None)
        return result

    def _trace(
        self,
        caller: McpCaller,
        request_id: str | int | None,
        name: str,
        meta: RequestParamsMeta | None,
    ) -> ToolTrace:
        """The call's span, child of the HTTP request's `traceparent`, else of the one MCP's
        conventions carry in `params._meta`."""
        jsonrpc_id = None if request_id is None else str(request_id)
        facts = ToolFacts(name, caller.policy.tenant, "mcp", None, caller.agent_session, jsonrpc_id)
        return self._telemetry.trace_tool(facts, caller.trace or meta_trace(meta))

    def _ended(
        self,
        row: ToolCall,
        started: float,
        trace: ToolTrace | None,
        status: str,
        kind: str | None,
    ) -> None:
        self._ledger.record(row, started, status, kind)
        if trace is not None:
            trace.end(status, kind)

    async def _dispatch(
        self,
        caller: McpCaller,
        request_id: str | int | None,
        tool: ServedTool,
        arguments: dict[str, Any],
        trace: ToolTrace | None,
    ) -> CallToolResult:
        if not tool.server:
            key = idempotency_key(caller.session_id, request_id)
            return await self._sandbox.call(
                caller.policy, caller.key_id, tool.source_name, arguments, key, caller.agent_session
            )
        context = None if trace is None else trace.begin_upstream(tool.server, tool.source_name)
        return await self._upstreams.call(tool.server, tool.source_name, arguments, context)


def meta_trace(meta: RequestParamsMeta | None) -> ClientTrace | None:
    """The W3C context a client put in the request's `_meta` (MCP's trace conventions)."""
    traceparent = None if meta is None else meta.get("traceparent")
    if not isinstance(traceparent, str):
        return None
    tracestate = meta.get("tracestate")  # type: ignore[union-attr]
    return ClientTrace(traceparent, tracestate if isinstance(tracestate, str) else None)


def _refused(exc: McpDoorError | SandboxError) -> bool:
    """Refused before anything ran (the ledger's `rejected`)."""
    return isinstance(exc, UnknownTool | ToolCallsLimited | ToolLimitsUnavailable) or (
        isinstance(exc, SandboxError) and exc.status_code in (400, 403, 409, 422, 429)
    )
