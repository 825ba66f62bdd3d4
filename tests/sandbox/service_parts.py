"""Shared pieces of the ToolRunService tests: one echo tool, a service over a store, a request."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from sandbox.idempotency import IdempotencyStore
from sandbox.service import ToolRunService
from sandbox.types import ToolLimits, ToolRunRequest, ToolSpec
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner

TOOLS = (ToolSpec("echo", ("echo", "{word}"), limits=ToolLimits(wall_s=5)),)


def make_service(
    sqlite_engine: sa.Engine, clock: ManualClock, runner: FakeRunner, gate: object = None
) -> tuple[ToolRunService, IdempotencyStore]:
    store = IdempotencyStore(sqlite_engine, clock, lease_s=10, retention_s=3600)
    return ToolRunService(store, runner, clock, logging.getLogger("t"), gate=gate), store  # type: ignore[arg-type]


def tool_request(
    key: str, word: str = "hi", tenant: str = "acme", tool: str = "echo"
) -> ToolRunRequest:
    return ToolRunRequest(tenant, "k1", key, tool, (("word", word),))
