"""The run object and its HTTP bodies: built once, stored as bytes, replayed verbatim."""

from __future__ import annotations

import json

from sandbox.idempotency import RunRecord
from sandbox.types import RunOutput, RunStatus

HTTP_FOR_STATUS = {
    RunStatus.SUCCEEDED: 200,
    RunStatus.FAILED: 200,  # the tool ran; its non-zero exit is a result, replayed as such
    RunStatus.TIMED_OUT: 200,
    RunStatus.LIMIT_EXCEEDED: 200,  # killed as a whole at its limit: a result, like a timeout
    RunStatus.INFRA_FAILED: 502,
    RunStatus.OUTCOME_UNKNOWN: 500,
}


def run_object(record: RunRecord, output: RunOutput) -> str:
    body = {
        "id": record.id,
        "object": "tool.run",
        "tool": record.tool,
        "runner": record.runner,
        "status": output.status.value,
        "exit_code": output.exit_code,
        "stdout": output.stdout,
        "stderr": output.stderr,
        "stdout_truncated": output.stdout_truncated,
        "stderr_truncated": output.stderr_truncated,
        "reason": output.reason,
        "created_at": round(record.created_at, 3),
        "started_at": round(output.started_at, 3),
        "finished_at": round(output.finished_at, 3),
        "duration_ms": int(round((output.finished_at - output.started_at) * 1000)),
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def pending_object(record: RunRecord) -> str:
    body = {
        "id": record.id,
        "object": "tool.run",
        "tool": record.tool,
        "runner": record.runner,
        "status": RunStatus.RUNNING.value,
        "created_at": round(record.created_at, 3),
    }
    return json.dumps(body, separators=(",", ":"))


def post_body(http_status: int, stored: str) -> bytes:
    """A 200 replies with the run object; any other status with the OpenAI error shape."""
    if http_status == 200:
        return stored.encode()
    run = json.loads(stored)
    error = {
        "message": f"tool run {run['id']} {run['status']}: {run['reason']}",
        "type": "server_error",
        "param": None,
        "code": f"tool_run_{run['status']}",
    }
    return json.dumps({"error": error}, ensure_ascii=False, separators=(",", ":")).encode()
