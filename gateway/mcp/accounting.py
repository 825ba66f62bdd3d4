"""One ledger row per MCP tool call (door `mcp`): who called which tool of which server, how it
ended and how long it took. No arguments and no output ever reach the ledger.

Columns: `model` holds the served tool name, `backend` the server (`sandbox` for a tenant's
sandboxed tool); tokens and money are zero.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from adapters.types import Usage
from gateway.ports import CallRecord, LedgerPort

DOOR = "mcp"
SANDBOX_SERVER = "sandbox"


@dataclass(frozen=True, slots=True)
class ToolCall:
    tenant: str
    key_id: str
    session_id: str  # the MCP session ("" on the stateless 2026 wire without x-session-id)
    tool: str  # as served
    server: str  # "" for a sandboxed tool


class ToolCallLedger:
    def __init__(self, ledger: LedgerPort, clock: Callable[[], float]) -> None:
        self._ledger = ledger
        self._clock = clock

    def started(self) -> float:
        return self._clock()

    def record(self, call: ToolCall, started: float, status: str, error_kind: str | None) -> None:
        """`status`: ok (a result, `isError` included), error (a fault), rejected (refused
        before it ran: unknown tool, limits)."""
        self._ledger.record(
            CallRecord(
                request_id=f"mcp-{uuid.uuid4().hex}",
                attempt=0,
                tenant=call.tenant,
                key_id=call.key_id,
                session_id=call.session_id,
                model=call.tool,
                backend=call.server or SANDBOX_SERVER,
                replica=None,
                status=status,
                error_kind=error_kind,
                usage=Usage(),
                cost_usd=0.0,
                uncached_cost_usd=0.0,
                ttft_ms=None,
                latency_ms=(self._clock() - started) * 1000.0,
                cache_diagnosis=None,
                door=DOOR,
            )
        )
