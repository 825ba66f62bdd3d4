"""What a finished tool run used, handed to a `RunMeter` (the gateway's ledger bills it).

Who ran which tool, where, how it ended, for how long and on how much: never its arguments or
output. Knows no prices and no ledger; `sandbox/` imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sandbox.types import RunnerKind, RunOutput, RunStatus, ToolLimits, ToolRunRequest

LOCAL_VCPU = 1.0  # a local box has no CPU share of its own: it is counted as one vCPU
MB_PER_GB = 1024


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """One run that ran and ended (any status), as its bill needs it."""

    run_id: str
    tenant: str
    key_id: str
    session_id: str | None
    door: str  # the route the run came through: tools.runs or mcp
    tool: str
    runner: RunnerKind
    status: RunStatus
    duration_s: float  # wall-clock, from the box's (or task's) start to its end
    vcpu: float  # vCPUs the run held: the Fargate task's size, LOCAL_VCPU for a local box
    memory_gb: float  # memory the run held: the Fargate task's size, else its memory_mb limit


class RunMeter(Protocol):
    def record(self, run: FinishedRun) -> None:
        """Takes the run without waiting on a database; may raise (the service logs it, the
        run's result is stored and answered all the same)."""
        ...


def finished_run(
    request: ToolRunRequest, run_id: str, runner: RunnerKind, limits: ToolLimits, out: RunOutput
) -> FinishedRun:
    """The run's meter reading: the size the runner reported, else the run's own limits."""
    vcpu = out.vcpu if out.vcpu is not None else LOCAL_VCPU
    memory_gb = out.memory_gb if out.memory_gb is not None else limits.memory_mb / MB_PER_GB
    return FinishedRun(
        run_id=run_id,
        tenant=request.tenant,
        key_id=request.key_id,
        session_id=request.session_id,
        door=request.door,
        tool=request.tool,
        runner=runner,
        status=out.status,
        duration_s=max(out.finished_at - out.started_at, 0.0),
        vcpu=vcpu,
        memory_gb=memory_gb,
    )
