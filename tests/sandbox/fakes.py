"""A ProcessRunner fake for service and API tests (the real runner has its own tests)."""

from __future__ import annotations

import asyncio
import time

from sandbox.errors import SandboxUnavailable
from sandbox.types import RunOutput, RunStatus, SandboxJob
from tests.sandbox.conftest import ManualClock


class FakeRunner:
    """A ProcessRunner that counts runs and can be held open by the test."""

    def __init__(self, clock: ManualClock, exit_code: int = 0) -> None:
        self.jobs: list[SandboxJob] = []
        self.release = asyncio.Event()
        self.release.set()
        self.clock = clock
        self.exit_code = exit_code
        self.available = True
        self.backend_delay_s = 0.0  # how long looking up the backend takes (a busy host)

    def backend(self) -> str:
        time.sleep(self.backend_delay_s)
        if not self.available:
            raise SandboxUnavailable("no namespaces in this test")
        return "fake"

    async def run(self, job: SandboxJob) -> RunOutput:
        self.jobs.append(job)
        await self.release.wait()
        status = RunStatus.SUCCEEDED if self.exit_code == 0 else RunStatus.FAILED
        return RunOutput(
            status,
            self.exit_code,
            " ".join(job.argv[1:]) + "\n",
            "",
            False,
            False,
            self.clock(),
            self.clock() + 0.25,
        )
