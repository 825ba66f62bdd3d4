"""A tool run served with its `execute_tool` span in the client's trace (only while tracing):
the span ends with the run's status, or the sandbox's error code when nothing ran; a request
refused before it became a run is a span that says why."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from gateway.http.trace_context import client_trace
from gateway.telemetry import Telemetry, ToolFacts, operations
from gateway.telemetry.tools import EXECUTE_TOOL
from policies.model import TenantPolicy
from sandbox.errors import SandboxError
from sandbox.service import ToolRunService
from sandbox.types import RunStatus, ToolRunReply, ToolRunRequest, ToolSpec

_NOT_FAILED = {RunStatus.SUCCEEDED.value, RunStatus.RUNNING.value}  # running: a replay, pending


async def traced_submit(
    telemetry: Telemetry,
    service: ToolRunService,
    specs: tuple[ToolSpec, ...],
    run: ToolRunRequest,
    call_id: str | None,
    headers: Mapping[str, str],
    began_ns: int,
) -> ToolRunReply:
    session = headers.get("x-session-id") or ""
    facts = ToolFacts(run.tool, run.tenant, "tools", call_id, session)
    trace = telemetry.trace_tool(facts, client_trace(headers), began_ns)
    try:
        reply = await service.submit(specs, run)
    except SandboxError as exc:
        trace.end("error", exc.code)
        raise
    except BaseException as exc:  # ours, or the client went away
        trace.end("error", type(exc).__name__)
        raise
    trace.span.set_attributes(
        {"lantern.tool.run_id": reply.run_id, "lantern.tool.replayed": reply.replayed}
    )
    status = str(orjson.loads(reply.body).get("status", ""))
    trace.end(status, None if status in _NOT_FAILED else status or "unknown")
    return reply


def trace_unparsed(
    telemetry: Telemetry | None,
    headers: Mapping[str, str],
    policy: TenantPolicy | None,
    run: ToolRunRequest | None,
    error_type: str,
) -> None:
    """A request refused before it became a run (its body did not parse, or asked for more
    than the tool's limits), while tracing (`telemetry` None: not tracing): an `execute_tool`
    span named by its operation alone, whose `error.type` says why. Nothing for a caller that
    was not authenticated, or for a run (its own span said how it ended)."""
    if telemetry is None or policy is None or run is not None:
        return
    trace = telemetry.trace_operation(policy.tenant, "tools", client_trace(headers))
    trace.end(operations.unread(EXECUTE_TOOL, error_type))
