"""Tool runs in the usage ledger: real runs in the local sandbox, through POST /v1/tools/runs
(real FastAPI app, ASGI transport), metered into a real `UsageRecorder` over a migrated ledger
(SQLite and PostgreSQL), read back by the cost report finance reads."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI, Request

from gateway.errors import AuthenticationFailed
from gateway.http.tools_routes import build_tools_router
from gateway.ledger.call_ledger import LineSink
from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from gateway.ledger.recorder import RecorderConfig, UsageRecorder
from gateway.ledger.tool_runs import RunnerPrice, ToolRunLedger
from gateway.reports.rows import cost_report
from gateway.reports.spend import spend_series
from policies.model import TenantPolicy
from policies.tools import ToolLimits, ToolPolicy
from sandbox.assembly import build_tool_run_service
from sandbox.metering import RunMeter

pytestmark = pytest.mark.sandbox
TS = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
# a local box priced like a small VM: 60 s billed at least, so a sub-second run costs exactly
# 60 s x 1 vCPU x $0.36/h + 60 s x memory GB x $0.072/h
LOCAL_PRICE = RunnerPrice(vcpu_hour_usd=0.36, gb_hour_usd=0.072, min_billed_s=60)
ACME_RUN_USD = Decimal("0.00630000")  # 0.006 (vCPU) + 15 GB-s (256 MB) x 0.00002
GLOBEX_RUN_USD = Decimal("0.00660000")  # 0.006 (vCPU) + 30 GB-s (512 MB) x 0.00002


def _policy(tenant: str, memory_mb: int) -> TenantPolicy:
    limits = ToolLimits(wall_s=10, memory_mb=memory_mb, cpu_s=5, output_kb=4)
    tool = ToolPolicy(name="run_python", command=("python3", "-c", "{code}"), limits=limits)
    return TenantPolicy(tenant=tenant, tools=(tool,))


CALLERS = {
    "Bearer sk-acme": (_policy("acme", 256), "k1"),
    "Bearer sk-globex": (_policy("globex", 512), "g1"),
}


async def authenticate(request: Request) -> tuple[TenantPolicy, str]:
    found = CALLERS.get(request.headers.get("authorization", ""))
    if found is None:
        raise AuthenticationFailed("invalid API key")
    return found


@dataclass
class Ledger:
    engine: sa.Engine
    recorder: UsageRecorder

    def rows(self) -> list[sa.Row[tuple[object, ...]]]:
        self.recorder.close()  # writes every queued row, then stops
        columns = (
            "tenant, key_id, session_id, model, backend, status, error_kind, door, kind, "
            "cost_usd, uncached_cost_usd, vcpu_seconds, gb_seconds, request_id, input_tokens"
        )
        with self.engine.connect() as db:
            return list(db.execute(sa.text(f"SELECT {columns} FROM usage ORDER BY tenant, ts")))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/var/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    recorder = UsageRecorder(engine, RecorderConfig(spool_dir=tmp_path / "spool", linger_s=0.01))
    recorder.start()
    yield Ledger(engine, recorder)
    recorder.close()
    engine.dispose()


async def _post(
    client: httpx.AsyncClient, caller: str, key: str, code: str, session: str | None = None
) -> httpx.Response:
    headers = {"authorization": caller, "Idempotency-Key": key}
    if session is not None:
        headers["x-session-id"] = session
    body = {"tool": "run_python", "arguments": {"code": code}}
    return await client.post("/v1/tools/runs", json=body, headers=headers)


def _serve(sqlite_engine: sa.Engine, meter: RunMeter, scenario: object) -> None:
    """Runs `scenario(client)` against a gateway whose runs are metered by `meter`."""
    service, local = build_tool_run_service(sqlite_engine, logging.getLogger("t"), meter=meter)
    app = FastAPI()
    app.include_router(build_tools_router(service, authenticate))

    async def main() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lantern") as client:
            await scenario(client)  # type: ignore[operator]

    try:
        asyncio.run(main())
    finally:
        local.close()


def test_a_run_writes_one_row_and_its_replay_none(
    default_backend: str, sqlite_engine: sa.Engine, ledger: Ledger
) -> None:
    meter = ToolRunLedger(ledger.recorder, lambda: TS, {"local": LOCAL_PRICE})
    run_ids: list[str] = []

    async def scenario(client: httpx.AsyncClient) -> None:
        first = await _post(client, "Bearer sk-acme", "k-1", "print(6*7)", session="s-1")
        again = await _post(client, "Bearer sk-acme", "k-1", "print(6*7)", session="s-1")
        assert (first.status_code, first.json()["stdout"]) == (200, "42\n")
        assert (again.headers["idempotent-replayed"], again.content) == ("true", first.content)
        run_ids.append(first.json()["id"])

    _serve(sqlite_engine, meter, scenario)
    (row,) = ledger.rows()
    assert tuple(row[:9]) == (
        "acme",
        "k1",
        "s-1",
        "run_python",
        "sandbox:local",
        "ok",
        None,
        "tools.runs",
        "tool_run",
    )
    assert Decimal(str(row.cost_usd)).quantize(Decimal("1e-8")) == ACME_RUN_USD
    assert Decimal(str(row.uncached_cost_usd)).quantize(Decimal("1e-8")) == ACME_RUN_USD
    assert (row.vcpu_seconds, row.gb_seconds, row.request_id) == (60.0, 15.0, run_ids[0])
    assert row.input_tokens == 0


def test_each_tenants_report_holds_only_its_own_runs(
    default_backend: str, sqlite_engine: sa.Engine, ledger: Ledger
) -> None:
    meter = ToolRunLedger(ledger.recorder, lambda: TS, {"local": LOCAL_PRICE})

    async def scenario(client: httpx.AsyncClient) -> None:
        ok = await _post(client, "Bearer sk-acme", "a-1", "print(1)")
        failed = await _post(client, "Bearer sk-acme", "a-2", "import sys; sys.exit(3)")
        # the same Idempotency-Key in another tenant is another run, billed to that tenant
        other = await _post(client, "Bearer sk-globex", "a-1", "print(2)")
        statuses = [r.json()["status"] for r in (ok, failed, other)]
        assert statuses == ["succeeded", "failed", "succeeded"]

    _serve(sqlite_engine, meter, scenario)
    rows = ledger.rows()
    assert [(r.tenant, r.status, r.error_kind) for r in rows] in (
        [("acme", "ok", None), ("acme", "error", "failed"), ("globex", "ok", None)],
        [("acme", "error", "failed"), ("acme", "ok", None), ("globex", "ok", None)],
    )
    sessions = session_factory(ledger.engine)
    report = cost_report(
        sessions, TS - timedelta(days=2), TS + timedelta(days=1), ["tenant", "kind"]
    )
    assert [(r.group, r.num_calls, r.cost_usd, r.saved_usd) for r in report.rows] == [
        (("acme", "tool_run"), 2, 2 * ACME_RUN_USD, Decimal(0)),
        (("globex", "tool_run"), 1, GLOBEX_RUN_USD, Decimal(0)),
    ]
    # whole days come from the daily rollup: the runs are in it, at the same cost
    by_tenant = cost_report(sessions, TS - timedelta(days=2), TS + timedelta(days=2), ["tenant"])
    assert [(r.group, r.cost_usd) for r in by_tenant.rows] == [
        (("acme",), 2 * ACME_RUN_USD),
        (("globex",), GLOBEX_RUN_USD),
    ]
    spend = spend_series(sessions, TS - timedelta(days=1), TS + timedelta(days=1), "kind")
    assert spend.series == {"tool_run": (2 * ACME_RUN_USD + GLOBEX_RUN_USD,)}


class BrokenSink:
    def record_line(self, line: bytes) -> None:
        raise OSError(28, "No space left on device")


def test_a_ledger_that_fails_loses_no_result(
    default_backend: str,
    sqlite_engine: sa.Engine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A spool that cannot be written, then a ledger database that is down: the run is
    answered, stored and replayed all the same; with the database down its row waits in the
    spool."""
    broken: LineSink = BrokenSink()
    down = create_ledger_engine("postgresql+psycopg://lantern@127.0.0.1:9/none?connect_timeout=1")
    recorder = UsageRecorder(down, RecorderConfig(spool_dir=tmp_path / "spool", linger_s=0.01))
    recorder.start()
    meters = [ToolRunLedger(broken, lambda: TS, {}), ToolRunLedger(recorder, lambda: TS, {})]
    try:
        for number, meter in enumerate(meters):

            async def scenario(client: httpx.AsyncClient, key: str = f"f-{number}") -> None:
                first = await _post(client, "Bearer sk-acme", key, "print('kept')")
                assert (first.status_code, first.json()["stdout"]) == (200, "kept\n")
                again = await _post(client, "Bearer sk-acme", key, "print('kept')")
                assert (again.headers["idempotent-replayed"], again.content) == (
                    "true",
                    first.content,
                )

            with caplog.at_level(logging.ERROR, logger="t"):
                _serve(sqlite_engine, meter, scenario)
        assert [r.getMessage().split(": ")[-1] for r in caplog.records] == ["not metered"]
        spooled = [
            json.loads(line)
            for path in sorted((tmp_path / "spool").glob("usage-*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        assert [(r["tenant"], r["kind"], r["cost_usd"]) for r in spooled] == [
            ("acme", "tool_run", "0E-8")
        ]
    finally:
        recorder.close()
        down.dispose()


def test_a_session_the_ledger_cannot_hold_is_a_400_before_anything_runs(
    default_backend: str, sqlite_engine: sa.Engine, ledger: Ledger
) -> None:
    """As on the chat doors: the rule and the field, in the OpenAI error shape; nothing ran,
    nothing is billed."""
    meter = ToolRunLedger(ledger.recorder, lambda: TS, {"local": LOCAL_PRICE})
    replies: list[httpx.Response] = []

    async def scenario(client: httpx.AsyncClient) -> None:
        replies.append(await _post(client, "Bearer sk-acme", "k-1", "print(1)", "s" * 257))

    _serve(sqlite_engine, meter, scenario)
    (reply,) = replies
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "identifier",
        "x-session-id",
    )
    assert ledger.rows() == []
