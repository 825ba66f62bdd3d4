"""The frozen data that crosses `sandbox/`'s edge: tool specs, run requests, outputs, replies.

The gateway builds `ToolSpec` from the tenant policy; `sandbox/` imports nothing of ours.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

RunnerKind = Literal["local", "fargate"]


@dataclass(frozen=True)
class ToolLimits:
    wall_s: float = 30.0
    memory_mb: int = 256
    cpu_s: float = 10.0
    output_kb: int = 64
    max_procs: int = 64
    file_mb: int = 64


@dataclass(frozen=True)
class FargateTarget:
    cluster: str
    task_definition: str
    subnets: tuple[str, ...]
    security_groups: tuple[str, ...]
    task_role_arn: str
    log_group: str
    container_name: str = "tool"
    log_stream_prefix: str = "tool"
    image: str = ""
    proxy_url: str = ""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    command: tuple[str, ...]
    runner: RunnerKind = "local"
    egress: tuple[str, ...] = ()
    limits: ToolLimits = field(default_factory=ToolLimits)
    fargate: FargateTarget | None = None


@dataclass(frozen=True)
class ToolRunRequest:
    """One POST /v1/tools/runs, after HTTP parsing; `arguments` are (name, value) pairs."""

    tenant: str
    key_id: str
    idempotency_key: str
    tool: str
    arguments: tuple[tuple[str, str], ...] = ()
    limits: ToolLimits | None = None
    max_concurrent_runs: int = 4  # the tenant's cap on its runs going at once
    session_id: str | None = None  # the agent session the client named (the ledger's)
    door: str = "tools.runs"  # the route it came through: tools.runs or mcp (the ledger's)


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the tool ran and exited non-zero
    TIMED_OUT = "timed_out"
    LIMIT_EXCEEDED = "limit_exceeded"  # the run's tree as a whole passed memory_mb or max_procs
    INFRA_FAILED = "infra_failed"  # the runner could not run or follow the tool
    OUTCOME_UNKNOWN = "outcome_unknown"  # started, then its owner vanished: never re-run


@dataclass(frozen=True)
class RunOutput:
    """What a runner observed; timings are wall-clock seconds since the epoch."""

    status: RunStatus
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    started_at: float
    finished_at: float
    reason: str = ""
    # the size the runner ran it on (a Fargate task's); None: the run's own limits
    vcpu: float | None = None
    memory_gb: float | None = None


@dataclass(frozen=True)
class ToolRunReply:
    """An HTTP-ready answer: the body bytes are stored once and replayed verbatim."""

    run_id: str
    http_status: int
    body: bytes
    replayed: bool


@dataclass(frozen=True)
class SandboxJob:
    """One process to run in a box: argv already filled, limits already resolved."""

    run_id: str
    tool: str
    argv: tuple[str, ...]
    limits: ToolLimits
    egress: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
