"""What the MCP door refuses or fails with, and the one place each becomes an MCP error.

Tool errors a model should read (a tool that ran and exited non-zero) are results with
`isError`, not these; these are the exceptional cases: unknown tool, limits, faults.
"""

from __future__ import annotations

from typing import Literal

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from sandbox.errors import InvalidToolRequest, SandboxError, ToolNotAllowed

LIMITED = -32029  # JSON-RPC's server range; mirrors HTTP 429
UPSTREAM_FAILED = -32050
TOOL_RUN_FAILED = -32060
UpstreamFault = Literal["unreachable", "timed_out", "invalid_reply"]


class McpDoorError(Exception):
    """Base of what `gateway/mcp/` raises on purpose."""

    code = INTERNAL_ERROR

    def data(self) -> dict[str, object]:
        return {}


class UnknownTool(McpDoorError):
    """Not a tool of this tenant (never declared, not granted, or denied) as of this call."""

    code = INVALID_PARAMS

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown tool {name!r}: not among this tenant's tools")


class ToolCallsLimited(McpDoorError):
    """A tenant limit on tool calls; nothing ran, the same call may be retried later."""

    code = LIMITED

    def __init__(self, rule: str, retry_after_s: int) -> None:
        super().__init__(f"{rule} reached; nothing ran, retry after {retry_after_s} s")
        self.rule = rule
        self.retry_after_s = retry_after_s

    def data(self) -> dict[str, object]:
        return {"rule": self.rule, "retry_after_s": self.retry_after_s}


class ToolLimitsUnavailable(McpDoorError):
    """The shared quota store is down and the tenant's policy fails closed; nothing ran."""

    code = LIMITED

    def __init__(self) -> None:
        super().__init__("the quota store is unavailable; nothing ran, retry after 1 s")

    def data(self) -> dict[str, object]:
        return {"rule": "quota_store_unavailable", "retry_after_s": 1}


class UpstreamFailed(McpDoorError):
    """An upstream MCP server could not answer this call (down, too slow, or garbage)."""

    code = UPSTREAM_FAILED

    def __init__(self, server: str, reason: UpstreamFault, detail: str = "") -> None:
        tail = f" ({detail})" if detail else ""
        super().__init__(f"upstream MCP server {server!r}: {reason.replace('_', ' ')}{tail}")
        self.server = server
        self.reason = reason

    def data(self) -> dict[str, object]:
        return {"server": self.server, "reason": self.reason}


class ToolRunFault(McpDoorError):
    """The sandbox could not run the tool or follow it (`infra_failed`, `outcome_unknown`):
    not the tool's outcome, so not a result."""

    code = TOOL_RUN_FAILED

    def __init__(self, run_id: str, status: str, reason: str) -> None:
        super().__init__(f"tool run {run_id}: {status} {reason}".rstrip())
        self.run_id = run_id
        self.status = status

    def data(self) -> dict[str, object]:
        return {"run_id": self.run_id, "status": self.status}


def mcp_error(exc: McpDoorError | SandboxError) -> MCPError:
    """The JSON-RPC error a client receives; a retry hint rides in `data.retry_after_s`."""
    if isinstance(exc, McpDoorError):
        return MCPError(code=exc.code, message=str(exc), data=exc.data() or None)
    data: dict[str, object] = {"code": exc.code}
    if exc.retry_after_s is not None:
        data["retry_after_s"] = exc.retry_after_s
        return MCPError(
            code=LIMITED, message=f"{exc}; retry after {exc.retry_after_s} s", data=data
        )
    if isinstance(exc, InvalidToolRequest | ToolNotAllowed):
        return MCPError(code=INVALID_PARAMS, message=str(exc), data=data)
    return MCPError(code=TOOL_RUN_FAILED, message=str(exc), data=data)


def error_kind(exc: McpDoorError | SandboxError | MCPError) -> str:
    """The ledger's `error_kind` for a failed call."""
    if isinstance(exc, UpstreamFailed):
        return f"upstream_{exc.reason}"
    if isinstance(exc, SandboxError):
        return exc.code
    if isinstance(exc, ToolCallsLimited):
        return "tool_calls_limited"
    if isinstance(exc, ToolLimitsUnavailable):
        return "quota_store_unavailable"
    if isinstance(exc, ToolRunFault):
        return f"tool_run_{exc.status}"
    if isinstance(exc, UnknownTool):
        return "unknown_tool"
    return "upstream_error" if isinstance(exc, MCPError) else "error"
