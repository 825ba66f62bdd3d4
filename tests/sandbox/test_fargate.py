"""The Fargate runner against moto's ECS + CloudWatch Logs, and botocore's Stubber (which
checks every request against the real ECS API model) for what moto does not do."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from botocore.stub import Stubber
from moto import mock_aws

from sandbox.errors import FargateConflict, InvalidToolRequest, RunnerFailed
from sandbox.fargate import FargatePolling, FargateRunner
from sandbox.fingerprint import client_token
from sandbox.idempotency import IdempotencyStore
from sandbox.service import ToolRunService
from sandbox.types import (
    FargateTarget,
    RunStatus,
    SandboxJob,
    ToolLimits,
    ToolRunRequest,
    ToolSpec,
)
from tests.sandbox.conftest import ManualClock

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/lantern-tool-acme"
LIMITS = ToolLimits(wall_s=60, memory_mb=512, cpu_s=30, output_kb=1)


def _target(subnet: str = "subnet-1", sg: str = "sg-1", td: str = "tool-runner:1") -> FargateTarget:
    return FargateTarget(
        cluster="sandbox",
        task_definition=td,
        subnets=(subnet,),
        security_groups=(sg,),
        task_role_arn=ROLE,
        log_group="/lantern/tools",
        proxy_url="http://10.0.9.5:3128",
    )


def _job(run_id: str = "0123456789abcdef0123456789abcdef") -> SandboxJob:
    return SandboxJob(
        run_id,
        "run_python",
        ("python3", "-c", "print(6*7)"),
        LIMITS,
        ("api.example.com:443",),
        (("LANTERN_IDEMPOTENCY_KEY", "TOKEN"),),
    )


def _runner(ecs: Any, logs: Any, clock: ManualClock) -> FargateRunner:
    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    return FargateRunner(ecs, logs, clock, logging.getLogger("t"), sleep, FargatePolling())


def test_run_task_request_is_exact() -> None:
    runner = _runner(None, None, ManualClock())
    assert runner.run_task_request(_job(), _target(), "TOKEN52") == {
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
    runner = _runner(None, None, ManualClock())
    leaky = SandboxJob("r", "t", ("x",), LIMITS, (), (("AWS_SECRET_ACCESS_KEY", "s"),))
    with pytest.raises(InvalidToolRequest):
        runner.run_task_request(leaky, _target(), "T")
    huge = SandboxJob("r", "t", ("python3", "-c", "x" * 9000), LIMITS)
    with pytest.raises(InvalidToolRequest):
        runner.run_task_request(huge, _target(), "T")


# ---- moto: the real request/response cycle, lifecycle and logs -------------------------


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
        yield {"ecs": ecs, "logs": logs, "target": _target(subnet, sg["GroupId"], td), "sent": sent}


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


# ---- Stubber: failures, throttling, conflicts, exit codes, MISSING, timeouts ----------


TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/sandbox/0f1e2d3c4b5a69788796a5b4c3d2e1f0"


def _stopped(
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
        self.runner = _runner(self.ecs, self.logs, clock)
        self.request = self.runner.run_task_request(_job(), _target(), "TOKEN")

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
        job = SandboxJob(record.id, "run_python", _job().argv, LIMITS, _job().egress, _job().env)
        self.request = self.runner.run_task_request(job, _target(), client_token("acme", "key-1"))
        return store, record, job

    def go(self, engine: sa.Engine, script: Any) -> Any:
        store, record, job = self.run(engine)
        script(self)
        with self.ecs_stub, self.logs_stub:
            result = asyncio.run(self.runner.run_recorded(store, record, job, _target()))
            self.ecs_stub.assert_no_pending_responses()
        return result


def test_failures_inside_a_200_reply_start_nothing(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.ecs_stub.add_response(
            "run_task",
            {
                "tasks": [],
                "failures": [
                    {
                        "arn": "arn:aws:ecs:us-east-1:123456789012:cluster/sandbox",
                        "reason": "RESOURCE:ENI",
                        "detail": "no ENI capacity",
                    }
                ],
            },
            s.request,
        )

    with pytest.raises(RunnerFailed) as caught:
        stub.go(sqlite_engine, script)
    assert str(caught.value) == "RunTask started no task (RESOURCE:ENI: no ENI capacity)"


def test_throttling_retries_with_the_same_client_token(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        for _ in range(2):
            s.ecs_stub.add_client_error(
                "run_task", "ThrottlingException", "Rate exceeded", expected_params=s.request
            )
        s.launched()
        s.describe(_stopped(0, "EssentialContainerExited", "Essential container in task exited"))
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.exit_code, result.finished_at - result.started_at) == (
        RunStatus.SUCCEEDED,
        0,
        7.0,
    )
    assert stub.request["clientToken"] == client_token("acme", "key-1")


def test_conflict_means_the_replay_drifted(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.ecs_stub.add_client_error(
            "run_task",
            "ConflictException",
            "token reused",
            http_status_code=409,
            expected_params=s.request,
        )

    with pytest.raises(FargateConflict):
        stub.go(sqlite_engine, script)


@pytest.mark.parametrize(
    ("reply", "status", "exit_code", "reason"),
    [
        (
            _stopped(
                137,
                "EssentialContainerExited",
                "Essential container in task exited",
                "OutOfMemoryError: Container killed due to memory usage",
            ),
            RunStatus.FAILED,
            137,
            "Essential container in task exited; OutOfMemoryError: Container killed due to memory usage",
        ),
        (
            _stopped(None, "TaskFailedToStart", "CannotPullContainerError: pull access denied"),
            RunStatus.INFRA_FAILED,
            None,
            "CannotPullContainerError: pull access denied",
        ),
        (
            _stopped(0, "SpotInterruption", "Your Spot Task was interrupted."),
            RunStatus.INFRA_FAILED,
            0,
            "Your Spot Task was interrupted.",
        ),
    ],
)
def test_exit_codes_and_stop_codes_map_to_results(
    sqlite_engine: sa.Engine,
    clock: ManualClock,
    reply: dict[str, Any],
    status: RunStatus,
    exit_code: int | None,
    reason: str,
) -> None:
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.launched()
        s.describe({"tasks": [{"taskArn": TASK_ARN, "lastStatus": "PROVISIONING"}], "failures": []})
        s.describe(reply)
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.exit_code, result.reason) == (status, exit_code, reason)


def test_missing_task_is_terminal_after_the_grace_period(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)
    missing = {"tasks": [], "failures": [{"arn": TASK_ARN, "reason": "MISSING"}]}

    def script(s: Stubbed) -> None:
        s.launched()
        for _ in range(7):  # polls at t = 0, 2, 6, 14, 30, 60, 90 s; only 90 > 60 s grace
            s.describe(missing)

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.reason) == (
        RunStatus.INFRA_FAILED,
        "task MISSING from DescribeTasks",
    )


def test_deadline_stops_the_task_and_reports_a_timeout(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)
    running = {"tasks": [{"taskArn": TASK_ARN, "lastStatus": "RUNNING"}], "failures": []}

    def script(s: Stubbed) -> None:
        s.launched()
        for _ in range(13):  # t = 0, 2, 6, 14, 30, 60, ..., 270: the first poll past 180 + 60 s
            s.describe(running)
        s.ecs_stub.add_response(
            "stop_task",
            {"task": {"taskArn": TASK_ARN}},
            {"cluster": "sandbox", "task": TASK_ARN, "reason": f"lantern-timeout:{s.run_id}"},
        )
        s.describe(_stopped(143, "UserInitiated", "lantern-timeout"))
        s.logs_stub.add_response(
            "get_log_events",
            {"events": [{"timestamp": 1, "message": "x" * 1500}], "nextForwardToken": "f/1"},
            {
                "logGroupName": "/lantern/tools",
                "startFromHead": True,
                "logStreamName": "tool/tool/0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            },
        )
        s.logs_stub.add_response(
            "get_log_events",
            {"events": [], "nextForwardToken": "f/1"},
            {
                "logGroupName": "/lantern/tools",
                "startFromHead": True,
                "nextToken": "f/1",
                "logStreamName": "tool/tool/0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            },
        )

    store, record, job = stub.run(sqlite_engine)
    stub.run_id = record.id  # type: ignore[attr-defined]
    script(stub)
    with stub.ecs_stub, stub.logs_stub:
        result = asyncio.run(stub.runner.run_recorded(store, record, job, _target()))
    assert (result.status, result.exit_code) == (RunStatus.TIMED_OUT, None)
    assert result.reason == "wall time limit 60s; lantern-timeout"
    assert (len(result.stdout), result.stdout_truncated) == (1024, True)
