"""No usage row lost, none twice: kill -9 of a gateway mid-traffic, and a gateway started and
serving while its PostgreSQL is unreachable (a TCP proxy the test cuts; the shared server is
never stopped). Real `lantern serve` processes, a real client, the wire-level fake upstream."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.adversarial.ledger_harness import (
    KEY,
    GatewayProcess,
    Traffic,
    gateway_config,
    ledger_request_ids,
    running,
    wait_until,
)
from tests.fakes.tcp_cut import TcpCut
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.slow
AUTH = {"authorization": f"Bearer {KEY}"}
ADMIN = "admin-secret-for-outage"
ADMIN_AUTH = {"authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        fake.app.chunk_delay_s = 0.002  # streams stay open a little: kills land mid-stream too
        yield fake


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path}/var/lantern.db"


def num_upstream_calls(upstream: FakeUpstream) -> int:
    return sum(r.path in ("/v1/chat/completions", "/v1/messages") for r in upstream.requests)


def assert_reconciled(rows: dict[str, int], succeeded: list[str], upstream_calls: int) -> None:
    """Every call the client saw succeed has exactly one row; the rest (in flight at the
    kill, each served by the upstream) at most one; nothing the upstream did not serve."""
    assert len(set(succeeded)) == len(succeeded)
    assert {rid: rows.get(rid, 0) for rid in succeeded} == dict.fromkeys(succeeded, 1)
    assert set(rows.values()) == {1}
    assert len(rows) <= upstream_calls


def test_kill_9_mid_traffic_loses_no_row_and_duplicates_none(
    upstream: FakeUpstream, database_url: str, tmp_path: Path
) -> None:
    var_dir = tmp_path / "var"
    config = gateway_config(var_dir, upstream, database_url)
    first = GatewayProcess(config, tmp_path / "first.log").start()
    traffic = Traffic(first.url).start()
    try:
        wait_until(lambda: traffic.num_succeeded() >= 120, "calls before the kill")
        first.kill9()  # rows of the last ~0.5 s are only in the spool now
    finally:
        traffic.stop()
    succeeded, upstream_calls = list(traffic.succeeded), num_upstream_calls(upstream)
    # the kill really caught rows outside the database: they are only in the dead one's spool
    assert len(ledger_request_ids(database_url)) < len(succeeded)
    with running(GatewayProcess(config, tmp_path / "second.log")):
        wait_until(
            lambda: set(succeeded) <= set(ledger_request_ids(database_url)),
            "the next process wrote the dead one's spooled rows",
        )
    assert_reconciled(ledger_request_ids(database_url), succeeded, upstream_calls)
    assert list((var_dir / "spool").glob("usage-*.jsonl")) == []


@pytest.mark.postgres
def test_gateway_starts_and_serves_with_postgres_down_then_catches_up(
    upstream: FakeUpstream, postgres_url: str, tmp_path: Path
) -> None:
    url = sa.make_url(postgres_url)
    proxy = TcpCut((url.host or "127.0.0.1", url.port or 5432))
    proxy.restore()
    proxy.cut()  # refusing before the gateway starts: its schema is not even migrated yet
    proxied_url = url.set(port=proxy.port).render_as_string(hide_password=False)
    config = gateway_config(tmp_path / "var", upstream, proxied_url, admin_token=ADMIN)
    try:
        with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
            traffic = Traffic(gateway.url).start()
            try:
                wait_until(lambda: traffic.num_succeeded() >= 60, "calls during the outage")
                assert ledger_request_ids(postgres_url) == {}  # the table does not exist yet
                assert_tool_runs_answer_503_in_json(gateway.url)
                assert_database_reads_answer_503_in_json(gateway.url)
                proxy.restore()
                wait_until(lambda: traffic.num_succeeded() >= 120, "calls after the outage")
            finally:
                traffic.stop()
            assert traffic.num_failed == 0
            succeeded = list(traffic.succeeded)
            wait_until(
                lambda: (
                    httpx.get(gateway.url + "/admin/reports/cost", headers=ADMIN_AUTH).is_success
                ),
                "the cost report once PostgreSQL answered",
            )
            wait_until(
                lambda: set(succeeded) <= set(ledger_request_ids(postgres_url)),
                "spooled rows written once PostgreSQL answered",
            )
            metrics = httpx.get(gateway.url + "/metrics", timeout=10).text
            missing = httpx.get(gateway.url + "/v1/tools/runs/nope", headers=AUTH, timeout=30)
            assert (missing.status_code, missing.json()["error"]["code"]) == (
                404,
                "tool_run_not_found",
            )  # the tool-run store is back too
        assert "lantern_ledger_database_up 1.0" in metrics
        rows = ledger_request_ids(postgres_url)
        assert rows == dict.fromkeys(succeeded, 1)  # exactly the calls served, once each
    finally:
        proxy.cut()


def assert_tool_runs_answer_503_in_json(url: str) -> None:
    body = {"tool": "run_python", "arguments": {"code": "print(1)"}}
    headers = {**AUTH, "idempotency-key": "outage-1"}
    reply = httpx.post(url + "/v1/tools/runs", json=body, headers=headers, timeout=30)
    assert reply.status_code == 503
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["code"] == "tool_store_unavailable"


def assert_database_reads_answer_503_in_json(url: str) -> None:
    """The admin report and the keys API read PostgreSQL directly: a 503 to retry, not a 500."""
    for path in ("/admin/reports/cost", "/admin/keys"):
        reply = httpx.get(url + path, headers=ADMIN_AUTH, timeout=30)
        assert reply.status_code == 503, (path, reply.text)
        assert reply.headers["retry-after"] == "5"
        assert reply.json()["error"]["code"] == "database"


def test_ledger_files_are_private(upstream: FakeUpstream, tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    config = gateway_config(var_dir, upstream, f"sqlite:///{var_dir}/ledger/lantern.db")
    with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
        traffic = Traffic(gateway.url, num_clients=1).start()
        try:
            wait_until(lambda: traffic.num_succeeded() >= 5, "a few calls")
        finally:
            traffic.stop()
        spool = var_dir / "spool"
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in spool.glob("usage-*.jsonl")}
        assert set(modes.values()) == {0o600}
        assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    ledger_dir = var_dir / "ledger"
    assert stat.S_IMODE(ledger_dir.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in ledger_dir.iterdir()}
    assert files["lantern.db"] == 0o600
    assert set(files.values()) == {0o600}  # -wal, -shm and the migration lock too
