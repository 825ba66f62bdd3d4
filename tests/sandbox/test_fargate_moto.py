"""The Fargate runner against moto's ECS and CloudWatch Logs: the request as sent, the
lifecycle, output from logs, and reattaching after a crash without a second RunTask."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from moto import mock_aws

from sandbox.errors import InvalidToolRequest
from sandbox.fargate import FargateRunner
from sandbox.fingerprint import client_token
from sandbox.idempotency import IdempotencyStore
from sandbox.service import ToolRunService
from sandbox.types import (
    SandboxJob,
    ToolRunRequest,
    ToolSpec,
)
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_parts import LIMITS, REGION, ROLE, make_job, make_runner, make_target


def test_run_task_request_is_exact() -> None:
    runner = make_runner(None, None, ManualClock())
    assert runner.run_task_request(make_job(), make_target(), "TOKEN52") == {
        "cluster": "sandbox",
        "taskDefinition": "tool-runner:1",
        "launchType": "FARGATE",
        "count": 1,
        "clientToken": "TOKEN52",
        "startedBy": "0123456789abcdef0123456789abcdef",
        "networkConfiguration": {
            "awsvpcConfiguration": {
                "subnets": ["subnet-1"],
                "securityGroups": ["sg-1"],
                "assignPublicIp": "DISABLED",
            }
        },
        "overrides": {
            "taskRoleArn": ROLE,
            "containerOverrides": [
                {
                    "name": "tool",
                    "command": ["python3", "-c", "print(6*7)"],
                    "environment": [
                        {"name": "HTTPS_PROXY", "value": "http://10.0.9.5:3128"},
                        {"name": "HTTP_PROXY", "value": "http://10.0.9.5:3128"},
                        {"name": "LANTERN_IDEMPOTENCY_KEY", "value": "TOKEN"},
                    ],
                    "memory": 512,
                }
            ],
        },
        "tags": [
            {"key": "lantern:run-id", "value": "0123456789abcdef0123456789abcdef"},
            {"key": "lantern:tool", "value": "run_python"},
        ],
        "enableExecuteCommand": False,
    }


def test_secrets_and_oversized_overrides_are_refused_before_any_call() -> None:
    runner = make_runner(None, None, ManualClock())
    leaky = SandboxJob("r", "t", ("x",), LIMITS, (), (("AWS_SECRET_ACCESS_KEY", "s"),))
    with pytest.raises(InvalidToolRequest):
        runner.run_task_request(leaky, make_target(), "T")
    huge = SandboxJob("r", "t", ("python3", "-c", "x" * 9000), LIMITS)
    with pytest.raises(InvalidToolRequest):
        runner.run_task_request(huge, make_target(), "T")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # moto needs it
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
        sg = ec2.create_security_group(GroupName="tools", Description="proxy only", VpcId=vpc)
        ecs = boto3.client("ecs", region_name=REGION)
        logs = boto3.client("logs", region_name=REGION)
        ecs.create_cluster(clusterName="sandbox")
        logs.create_log_group(logGroupName="/lantern/tools")
        td = ecs.register_task_definition(
            family="tool-runner",
            networkMode="awsvpc",
            requiresCompatibilities=["FARGATE"],
            cpu="256",
            memory="512",
            containerDefinitions=[
                {
                    "name": "tool",
                    "image": "lantern/tool@sha256:abc",
                    "memory": 512,
                    "essential": True,
                    "logConfiguration": {
                        "logDriver": "awslogs",
                        "options": {
                            "awslogs-group": "/lantern/tools",
                            "awslogs-region": REGION,
                            "awslogs-stream-prefix": "tool",
                        },
                    },
                }
            ],
        )["taskDefinition"]["taskDefinitionArn"]
        sent: list[dict[str, Any]] = []
        ecs.meta.events.register(
            "provide-client-params.ecs.RunTask",
            lambda params, **_: sent.append(json.loads(json.dumps(params))),
        )
        yield {
            "ecs": ecs,
            "logs": logs,
            "target": make_target(subnet, sg["GroupId"], td),
            "sent": sent,
        }


def _emit_logs(aws: dict[str, Any]) -> None:
    """What awslogs would do while the task runs: lines in `<prefix>/<container>/<task-id>`."""
    for arn in aws["ecs"].list_tasks(cluster="sandbox")["taskArns"]:
        stream = f"tool/tool/{arn.rsplit('/', 1)[-1]}"
        if aws["logs"].describe_log_streams(
            logGroupName="/lantern/tools", logStreamNamePrefix=stream
        )["logStreams"]:
            continue
        aws["logs"].create_log_stream(logGroupName="/lantern/tools", logStreamName=stream)
        now_ms = int(time.time() * 1000)  # CloudWatch refuses events far from now
        aws["logs"].put_log_events(
            logGroupName="/lantern/tools",
            logStreamName=stream,
            logEvents=[
                {"timestamp": now_ms, "message": "42"},
                {"timestamp": now_ms + 1, "message": "done"},
            ],
        )


def _service(
    aws: dict[str, Any], engine: sa.Engine, clock: ManualClock
) -> tuple[ToolRunService, IdempotencyStore]:
    async def sleep(seconds: float) -> None:
        _emit_logs(aws)
        clock.advance(seconds)

    runner = FargateRunner(aws["ecs"], aws["logs"], clock, logging.getLogger("t"), sleep)
    store = IdempotencyStore(engine, clock, lease_s=30)
    return ToolRunService(store, None, clock, logging.getLogger("t"), fargate=runner), store  # type: ignore[arg-type]


def _spec(aws: dict[str, Any]) -> tuple[ToolSpec, ...]:
    return (
        ToolSpec(
            "run_python",
            ("python3", "-c", "{code}"),
            "fargate",
            ("api.example.com:443",),
            LIMITS,
            aws["target"],
        ),
    )


REQUEST = ToolRunRequest("acme", "k1", "key-1", "run_python", (("code", "print(6*7)"),))


def test_moto_lifecycle_sends_the_exact_request_and_reads_logs(
    aws: dict[str, Any], sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    service, store = _service(aws, sqlite_engine, clock)
    reply = asyncio.run(service.submit(_spec(aws), REQUEST))
    body = json.loads(reply.body)
    assert (reply.http_status, body["status"], body["exit_code"]) == (200, "succeeded", 0)
    assert (body["stdout"], body["runner"]) == ("42\ndone", "fargate")
    (sent,) = aws["sent"]
    record = store.find("acme", "key-1")
    assert record is not None and record.state == "done"
    assert sent == json.loads(
        json.dumps(
            FargateRunner(None, None, clock, logging.getLogger("t")).run_task_request(
                SandboxJob(
                    record.id,
                    "run_python",
                    ("python3", "-c", "print(6*7)"),
                    LIMITS,
                    ("api.example.com:443",),
                    (("LANTERN_IDEMPOTENCY_KEY", client_token("acme", "key-1")),),
                ),
                aws["target"],
                client_token("acme", "key-1"),
            )
        )
    )
    task = aws["ecs"].describe_tasks(
        cluster="sandbox", tasks=aws["ecs"].list_tasks(cluster="sandbox")["taskArns"]
    )["tasks"][0]
    assert task["startedBy"] == record.id
    assert task["overrides"]["taskRoleArn"] == ROLE
    again = asyncio.run(service.submit(_spec(aws), REQUEST))
    assert (again.body, again.replayed, len(aws["sent"])) == (reply.body, True, 1)


def test_crash_after_run_task_reattaches_instead_of_launching_again(
    aws: dict[str, Any], sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    service, store = _service(aws, sqlite_engine, clock)
    prepared = service._prepare(_spec(aws), REQUEST)
    claim = store.claim("acme", "key-1", prepared.fingerprint, "run_python", "fargate").record
    runner = FargateRunner(aws["ecs"], aws["logs"], clock, logging.getLogger("t"))
    job = SandboxJob(
        claim.id,
        prepared.job.tool,
        prepared.job.argv,
        prepared.job.limits,
        prepared.job.egress,
        prepared.job.env,
    )
    request = runner.run_task_request(job, aws["target"], client_token("acme", "key-1"))
    store.mark_started(claim.id, claim.fence, json.dumps({"request": request}))
    aws["ecs"].run_task(**request)  # ... and then the gateway died before recording the ARN
    clock.advance(31)
    reply = asyncio.run(service.submit(_spec(aws), REQUEST))
    assert json.loads(reply.body)["status"] == "succeeded"
    assert len(aws["sent"]) == 1  # only the pre-crash RunTask
    assert len(aws["ecs"].list_tasks(cluster="sandbox")["taskArns"]) == 1
