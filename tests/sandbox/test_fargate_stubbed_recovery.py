"""The Fargate runner around a launch, against botocore's Stubber: a store that goes away,
logs read up to the output cap, keys and slots released, recovery and token conflicts."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import sqlalchemy as sa

from sandbox.errors import FargateConflict, RunnerFailed, ToolStoreUnavailable
from sandbox.idempotency import IdempotencyStore
from sandbox.service import ToolRunService
from sandbox.types import RunStatus, ToolRunRequest, ToolSpec
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_parts import LIMITS, make_job, make_target
from tests.sandbox.fargate_stubber import TASK_ARN, Stubbed, stopped_reply


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
    stub.describe(
        stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
    )
    stub.no_logs()
    with stub.ecs_stub, stub.logs_stub:
        result = asyncio.run(
            stub.runner.run_recorded(StoreGoneAfterTheStart(store), record, job, make_target())
        )
        stub.ecs_stub.assert_no_pending_responses()
    assert (result.status, result.exit_code) == (RunStatus.SUCCEEDED, 0)
    started = store.find("acme", "key-1")
    assert started is not None and started.state == "started"


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
        s.describe(
            stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
        )
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
    stub.ecs_stub.add_response(
        "describe_tasks", stopped_reply(None, "UserInitiated", "lantern-timeout")
    )
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
    stub.describe(
        stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
    )
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
