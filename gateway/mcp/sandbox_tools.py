"""The tenant's sandboxed tools (`tools:` in its policy) as MCP tools: a definition derived
from the command's placeholders, and a call that goes through the sandbox's `ToolRunService`
(runner, egress proxy, limits, idempotency) exactly as `POST /v1/tools/runs` does.
"""

from __future__ import annotations

from typing import Any

import orjson
from mcp_types import CallToolResult, TextContent, Tool

from gateway.http.tools_routes import tool_spec
from gateway.mcp.errors import ToolRunFault
from policies.model import TenantPolicy
from policies.tools import ToolPolicy
from sandbox.errors import InvalidToolRequest
from sandbox.service import ToolRunService
from sandbox.types import ToolRunRequest

# statuses that are the tool's own outcome (a result the model reads); the others (the box
# could not run it, or its owner died) are faults of the service
_OUTCOMES = {"succeeded", "failed", "timed_out", "limit_exceeded"}


def sandbox_definition(tool: ToolPolicy) -> Tool:
    """The tool as `tools/list` shows it: each placeholder a required property, in the order
    the command names them; a pure function of the policy entry, so the bytes never drift."""
    properties: dict[str, Any] = {}
    for name in tool.placeholder_names():
        declared = tool.arguments.get(name)
        schema: dict[str, Any] = {"type": declared.type if declared else "string"}
        if declared and declared.description:
            schema["description"] = declared.description
        if declared and declared.enum:
            schema["enum"] = list(declared.enum)
        properties[name] = schema
    input_schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return Tool(name=tool.name, description=tool.description or None, input_schema=input_schema)


def _argument_text(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidToolRequest(f"arguments.{name}", "must be a string or a number")
    return str(value)


class SandboxTools:
    def __init__(self, service: ToolRunService) -> None:
        self._service = service

    async def call(
        self,
        policy: TenantPolicy,
        key_id: str,
        tool: str,
        arguments: dict[str, Any],
        idempotency_key: str,
        session_id: str = "",
    ) -> CallToolResult:
        """Run (or replay) one call; the run's own failure is a result with `isError`.
        `session_id`: the agent session the ledger bills the run to ("" for none)."""
        filled = tuple(sorted((k, _argument_text(k, v)) for k, v in arguments.items()))
        run = ToolRunRequest(
            policy.tenant,
            key_id,
            idempotency_key,
            tool,
            filled,
            max_concurrent_runs=policy.tool_runs.max_concurrent,
            session_id=session_id or None,  # the run's ledger row: its session and door
            door="mcp",
        )
        specs = tuple(tool_spec(entry) for entry in policy.tools)
        reply = await self._service.submit(specs, run)
        return run_result(orjson.loads(reply.body))


def run_result(run: dict[str, Any]) -> CallToolResult:
    """stdout as the result's text; a run that failed, timed out or broke a limit says so
    after its output, with `isError` set; the whole run object as structured content."""
    status = run.get("status")
    if status not in _OUTCOMES:
        raise ToolRunFault(str(run.get("id")), str(status), str(run.get("reason", "")))
    text = run.get("stdout", "")
    failed = status != "succeeded"
    if failed:
        why = run.get("reason") or f"exit code {run.get('exit_code')}"
        text = f"{text}{run.get('stderr', '')}[{status}: {why}]"
    return CallToolResult(content=[TextContent(text=text)], structured_content=run, is_error=failed)
