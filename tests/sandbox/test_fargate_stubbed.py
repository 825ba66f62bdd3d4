"""The Fargate runner against botocore's Stubber (every request checked against the real ECS
API model): failures in a 200, throttling, conflicts, exit and stop codes, MISSING, deadlines."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from typing import Any

import boto3
import pytest
import sqlalchemy as sa
from botocore.stub import Stubber

from sandbox.errors import FargateConflict, RunnerFailed, ToolStoreUnavailable
from sandbox.fingerprint import client_token
from sandbox.idempotency import IdempotencyStore
from sandbox.service import ToolRunService
from sandbox.types import RunStatus, SandboxJob, ToolRunRequest, ToolSpec
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_parts import LIMITS, REGION, make_job, make_runner, make_target

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
        s.describe(_stopped(0, "EssentialContainerExited", "Essential container in task exited"))
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert clock.now == 1_800_000_000.0 + 2 + 4 + 8  # three polls waited for, doubling


class StoreGoneAfterTheStart:
    """A RunStore whose database takes the started mark, then does not answer."""

    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store

    def mark_started(self, run_id: str, fence: int, backend_ref: str | None) -> bool:
        return self.store.mark_started(run_id, fence, backend_ref)

    def set_ref(self, run_id: str, fence: int, backend_ref: str) -> bool:
        raise ToolStoreUnavailable()


def test_a_task_ref_the_store_cannot_take_does_not_abandon_the_task(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """The task ARN is only a shortcut for a recovery (ListTasks and the stored RunTask find
    the task too): the database going away right after the launch does not stop following."""
    stub = Stubbed(clock)
    store, record, job = stub.run(sqlite_engine)

    stub.launched()
    stub.describe(_stopped(0, "EssentialContainerExited", "Essential container in task exited"))
    stub.no_logs()
    with stub.ecs_stub, stub.logs_stub:
        result = asyncio.run(
            stub.runner.run_recorded(StoreGoneAfterTheStart(store), record, job, make_target())
        )
        stub.ecs_stub.assert_no_pending_responses()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, 0)
    started = store.find("acme", "key-1")
    assert started is not None and started.state == "started"


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
        result = asyncio.run(stub.runner.run_recorded(store, record, job, make_target()))
    assert (result.status, result.exit_code) == (RunStatus.TIMED_OUT, None)
    assert result.reason == "wall time limit 60s; lantern-timeout"
    assert (len(result.stdout), result.stdout_truncated) == (1024, True)


def test_a_long_log_is_read_only_until_it_fills_the_output_cap(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """A tool that logs without end: the pages are read until the 1 KiB cap is passed, never
    the rest (a third page would be an unstubbed call)."""
    stub = Stubbed(clock)
    stream = {
        "logGroupName": "/lantern/tools",
        "startFromHead": True,
        "logStreamName": "tool/tool/0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    }

    def script(s: Stubbed) -> None:
        s.launched()
        s.describe(_stopped(0, "EssentialContainerExited", "Essential container in task exited"))
        for page, after in ((1, None), (2, "f/1")):
            s.logs_stub.add_response(
                "get_log_events",
                {"events": [{"timestamp": page, "message": str(page) * 600}],
                 "nextForwardToken": f"f/{page}"},
                {**stream, "nextToken": after} if after else stream,
            )  # fmt: skip

    result = stub.go(sqlite_engine, script)
    stub.logs_stub.assert_no_pending_responses()
    assert (result.status, result.stdout_truncated) == (RunStatus.SUCCEEDED, True)
    assert result.stdout == "1" * 600 + "\n" + "2" * 423


def test_a_launch_that_started_nothing_releases_the_key(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)
    store = IdempotencyStore(sqlite_engine, clock)
    service = ToolRunService(store, None, clock, logging.getLogger("t"), fargate=stub.runner)  # type: ignore[arg-type]
    spec = ToolSpec(
        "run_python",
        ("python3", "-c", "{code}"),
        "fargate",
        ("api.example.com:443",),
        LIMITS,
        make_target(),
    )
    request = ToolRunRequest("acme", "k1", "key-1", "run_python", (("code", "print(6*7)"),))
    failure = {"tasks": [], "failures": [{"reason": "RESOURCE:MEMORY", "detail": "no capacity"}]}
    stub.ecs_stub.add_response("run_task", failure)
    with stub.ecs_stub, pytest.raises(RunnerFailed):
        asyncio.run(service.submit((spec,), request))
    assert store.find("acme", "key-1") is None  # the client may retry the same key


class ExpiringSlots:
    """RunSlots whose slots expire on the test's clock, as Redis's own expire on its clock: a
    slot released after its expiry had stopped counting while its run still went on."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.expires_at: dict[str, float] = {}
        self.held_to_the_end: list[bool] = []

    async def acquire(self, tenant: str, token: str, limit: int, ttl_s: float) -> bool:
        self.expires_at[token] = self.clock() + ttl_s
        return True

    async def release(self, tenant: str, token: str) -> None:
        self.held_to_the_end.append(self.clock() <= self.expires_at.pop(token))


def test_a_fargate_runs_slot_outlives_its_slowest_start_and_stop(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """A task that starts late and runs to the deadline (StopTask past 180 s + wall_s) keeps
    the tenant's slot to the end, so the tenant cannot start more tasks than its cap."""
    stub = Stubbed(clock)
    slots = ExpiringSlots(clock)
    store = IdempotencyStore(sqlite_engine, clock)
    service = ToolRunService(
        store,
        None,
        clock,
        logging.getLogger("t"),
        fargate=stub.runner,
        slots=slots,  # type: ignore[arg-type]
    )
    spec = ToolSpec("run_python", make_job().argv, "fargate", (), LIMITS, make_target())
    stub.ecs_stub.add_response("run_task", {"tasks": [{"taskArn": TASK_ARN}], "failures": []})
    pending = {"tasks": [{"taskArn": TASK_ARN, "lastStatus": "PENDING"}], "failures": []}
    for _ in range(13):  # t = 0, 2, 6, 14, 30, 60, ..., 270: the first poll past 180 + 60 s
        stub.ecs_stub.add_response("describe_tasks", pending)
    stub.ecs_stub.add_response("stop_task", {"task": {"taskArn": TASK_ARN}})
    stub.ecs_stub.add_response("describe_tasks", _stopped(None, "UserInitiated", "lantern-timeout"))
    stub.logs_stub.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"})
    with stub.ecs_stub, stub.logs_stub:
        reply = asyncio.run(
            service.submit((spec,), ToolRunRequest("acme", "k1", "key-1", spec.name))
        )
    assert json.loads(reply.body)["status"] == "timed_out"
    assert slots.held_to_the_end == [True]


def test_recovery_resends_the_stored_request_byte_for_byte(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)
    store, record, job = stub.run(sqlite_engine)
    stored = json.dumps({"request": stub.request}, sort_keys=True)
    store.mark_started(record.id, record.fence, stored)  # ...then the gateway died
    clock.advance(31)
    taken = store.take_over(store.claim("acme", "key-1", "fp", "run_python", "fargate").record)
    assert taken is not None and taken.state == "started"
    stub.ecs_stub.add_response(
        "list_tasks", {"taskArns": []}, {"cluster": "sandbox", "startedBy": record.id}
    )
    stub.launched()  # expected_params: exactly the stored request, same clientToken
    stub.describe(_stopped(0, "EssentialContainerExited", "Essential container in task exited"))
    stub.no_logs()
    with stub.ecs_stub, stub.logs_stub:
        result = asyncio.run(stub.runner.run_recorded(store, taken, job, make_target()))
        stub.ecs_stub.assert_no_pending_responses()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert json.loads(store.get("acme", record.id).backend_ref)["task_arn"] == TASK_ARN  # type: ignore[union-attr, arg-type]


def test_a_token_conflict_keeps_the_record_and_later_reads_as_unknown(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)
    store = IdempotencyStore(sqlite_engine, clock)
    service = ToolRunService(store, None, clock, logging.getLogger("t"), fargate=stub.runner)  # type: ignore[arg-type]
    spec = ToolSpec("run_python", ("python3", "-c", "{code}"), "fargate", (), LIMITS, make_target())
    request = ToolRunRequest("acme", "k1", "key-1", "run_python", (("code", "print(6*7)"),))
    stub.ecs_stub.add_client_error("run_task", "ConflictException", "token reused", 409)
    stub.ecs_stub.add_response("list_tasks", {"taskArns": []})
    stub.ecs_stub.add_client_error("run_task", "ConflictException", "token reused", 409)
    with stub.ecs_stub:
        with pytest.raises(FargateConflict):
            asyncio.run(service.submit((spec,), request))
        row = store.find("acme", "key-1")
        assert row is not None and row.state == "started"  # ECS knows a task by this token
        clock.advance(31)  # the lease runs out; the retry reattaches and cannot find the task
        reply = asyncio.run(service.submit((spec,), request))
    assert reply.http_status == 500
    assert json.loads(reply.body)["error"]["code"] == "tool_run_outcome_unknown"
