"""The Fargate runner reports the size a task was billed at (DescribeTasks' task-level `cpu`
and `memory`), under botocore's Stubber."""

from __future__ import annotations

import sqlalchemy as sa

from sandbox.types import RunStatus
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fargate_stubber import Stubbed, stopped_reply


def test_a_stopped_task_reports_its_size_and_its_seconds(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.launched()
        reply = stopped_reply(0, "EssentialContainerExited", "Essential container in task exited")
        reply["tasks"][0].update(cpu="512", memory="2048")
        s.describe(reply)
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.vcpu, result.memory_gb) == (RunStatus.SUCCEEDED, 0.5, 2.0)
    assert result.finished_at - result.started_at == 7.0


def test_a_task_described_without_its_size_reports_none(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """The meter then counts the run's own limits (sandbox/metering.py)."""
    stub = Stubbed(clock)

    def script(s: Stubbed) -> None:
        s.launched()
        s.describe(stopped_reply(1, "EssentialContainerExited", "exited"))
        s.no_logs()

    result = stub.go(sqlite_engine, script)
    assert (result.status, result.vcpu, result.memory_gb) == (RunStatus.FAILED, None, None)
