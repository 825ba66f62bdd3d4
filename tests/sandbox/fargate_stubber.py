"""The ECS and CloudWatch Logs clients under botocore's Stubber (every request checked against
the real API model), and the STOPPED task reply the stubbed Fargate tests script."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import boto3
import sqlalchemy as sa
from botocore.stub import Stubber

from sandbox.fingerprint import client_token
from sandbox.idempotency import IdempotencyStore
from sandbox.types import SandboxJob
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_parts import LIMITS, REGION, make_job, make_runner, make_target

TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/sandbox/0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def stopped_reply(
    exit_code: int | None, stop_code: str, reason: str, container_reason: str = ""
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "tool", "lastStatus": "STOPPED"}
    if exit_code is not None:
        container["exitCode"] = exit_code
    if container_reason:
        container["reason"] = container_reason
    started = dt.datetime(2027, 1, 15, 8, 0, 0, tzinfo=dt.UTC)
    return {
        "tasks": [
            {
                "taskArn": TASK_ARN,
                "lastStatus": "STOPPED",
                "stopCode": stop_code,
                "stoppedReason": reason,
                "containers": [container],
                "startedAt": started,
                "stoppedAt": started + dt.timedelta(seconds=7),
            }
        ],
        "failures": [],
    }


class Stubbed:
    def __init__(self, clock: ManualClock) -> None:
        self.ecs = boto3.client(
            "ecs", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.logs = boto3.client(
            "logs", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.ecs_stub, self.logs_stub = Stubber(self.ecs), Stubber(self.logs)
        self.clock = clock
        self.runner = make_runner(self.ecs, self.logs, clock)
        self.request = self.runner.run_task_request(make_job(), make_target(), "TOKEN")

    def launched(self) -> None:
        self.ecs_stub.add_response(
            "run_task", {"tasks": [{"taskArn": TASK_ARN}], "failures": []}, self.request
        )

    def describe(self, reply: dict[str, Any]) -> None:
        self.ecs_stub.add_response(
            "describe_tasks", reply, {"cluster": "sandbox", "tasks": [TASK_ARN]}
        )

    def no_logs(self) -> None:
        self.logs_stub.add_response(
            "get_log_events",
            {"events": [], "nextForwardToken": "f/1"},
            {
                "logGroupName": "/lantern/tools",
                "startFromHead": True,
                "logStreamName": "tool/tool/0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            },
        )

    def run(self, engine: sa.Engine) -> Any:
        store = IdempotencyStore(engine, self.clock)
        record = store.claim("acme", "key-1", "fp", "run_python", "fargate").record
        job = SandboxJob(
            record.id, "run_python", make_job().argv, LIMITS, make_job().egress, make_job().env
        )
        self.request = self.runner.run_task_request(
            job, make_target(), client_token("acme", "key-1")
        )
        return store, record, job

    def go(self, engine: sa.Engine, script: Any) -> Any:
        store, record, job = self.run(engine)
        script(self)
        with self.ecs_stub, self.logs_stub:
            result = asyncio.run(self.runner.run_recorded(store, record, job, make_target()))
            self.ecs_stub.assert_no_pending_responses()
        return result
