"""The Fargate runner's launch and polling against botocore's Stubber: failures in a 200,
throttling, conflicts, exit and stop codes, MISSING, deadlines."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from sandbox.errors import FargateConflict, RunnerFailed
from sandbox.fingerprint import client_token
from sandbox.types import RunStatus
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_parts import make_target
from tests.sandbox.fargate_stubber import TASK_ARN, Stubbed, stopped_reply


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
        s.describe(
            stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
        )
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.exit_code, result.finished_at - result.started_at) == (
        RunStatus.SUCCEEDED,
        0,
        7.0,
    )
    assert stub.request["clientToken"] == client_token("acme", "key-1")


def test_a_throttled_poll_is_polled_again_not_a_failed_run(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """DescribeTasks shares the account's rate with every tenant's runs: a throttled poll is
    a poll with no news, and the task is followed to its end."""
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.launched()
        s.describe({"tasks": [{"taskArn": TASK_ARN, "lastStatus": "RUNNING"}], "failures": []})
        for _ in range(2):
            s.ecs_stub.add_client_error(
                "describe_tasks",
                "ThrottlingException",
                "Rate exceeded",
                expected_params={"cluster": "sandbox", "tasks": [TASK_ARN]},
            )
        s.describe(
            stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
        )
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert clock.now == 1_800_000_000.0 + 2 + 4 + 8  # three polls waited for, doubling


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
            stopped_reply(
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
            stopped_reply(
                None, "TaskFailedToStart", "CannotPullContainerError: pull access denied"
            ),
            RunStatus.INFRA_FAILED,
            None,
            "CannotPullContainerError: pull access denied",
        ),
        (
            stopped_reply(0, "SpotInterruption", "Your Spot Task was interrupted."),
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
        s.describe(stopped_reply(143, "UserInitiated", "lantern-timeout"))
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
        result = asyncio.run(stub.runner.run_recorded(store, record, job, make_target()))
    assert (result.status, result.exit_code) == (RunStatus.TIMED_OUT, None)
    assert result.reason == "wall time limit 60s; lantern-timeout"
    assert (len(result.stdout), result.stdout_truncated) == (1024, True)
