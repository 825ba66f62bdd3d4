"""Shared pieces of the Fargate runner tests: targets, jobs, a runner with a manual clock."""

from __future__ import annotations

import logging
from typing import Any

from sandbox.fargate import FargatePolling, FargateRunner
from sandbox.types import FargateTarget, SandboxJob, ToolLimits
from tests.sandbox.conftest import ManualClock

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/lantern-tool-acme"
LIMITS = ToolLimits(wall_s=60, memory_mb=512, cpu_s=30, output_kb=1)


def make_target(
    subnet: str = "subnet-1", sg: str = "sg-1", td: str = "tool-runner:1"
) -> FargateTarget:
    return FargateTarget(
        cluster="sandbox",
        task_definition=td,
        subnets=(subnet,),
        security_groups=(sg,),
        task_role_arn=ROLE,
        log_group="/lantern/tools",
        proxy_url="http://10.0.9.5:3128",
    )


def make_job(run_id: str = "0123456789abcdef0123456789abcdef") -> SandboxJob:
    return SandboxJob(
        run_id,
        "run_python",
        ("python3", "-c", "print(6*7)"),
        LIMITS,
        ("api.example.com:443",),
        (("LANTERN_IDEMPOTENCY_KEY", "TOKEN"),),
    )


def make_runner(ecs: Any, logs: Any, clock: ManualClock) -> FargateRunner:
    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    return FargateRunner(ecs, logs, clock, logging.getLogger("t"), sleep, FargatePolling())
