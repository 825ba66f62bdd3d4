"""A tool run served with its `execute_tool` span in the client's trace (only while tracing):
the span ends with the run's status, or the sandbox's error code when nothing ran."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from gateway.http.trace_context import client_trace
from gateway.telemetry import Telemetry, ToolFacts
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
