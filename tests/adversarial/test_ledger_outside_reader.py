"""The SQLite ledger keeps every row whatever else opens its file: another process reading it
(a report, `sqlite3`, a backup) while the tool-run store sweeps, and a file deleted under the
gateway is noticed by `/ready` and `/metrics`. Real `lantern serve` processes, a real client."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.adversarial.ledger_harness import (
    GatewayProcess,
    chat_call,
    gateway_config,
    running,
    wait_until,
)
from tests.fakes.upstream import FakeUpstream

pytestmark = pytest.mark.slow
NUM_CALLS = 12


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def outside_count(database: Path) -> int:
    """Rows in `usage` as another process sees them: it opens, reads and closes the file."""
    code = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1])\n"
        "print(db.execute('SELECT count(*) FROM usage').fetchone()[0])\n"
        "db.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(database)], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(values[0]) if len(values) == 1 else float("nan")


def wait_written(url: str, num_rows: int) -> None:
    """Until the gateway says `num_rows` rows are in the database (its writer batches them)."""
    name = "lantern_ledger_rows_written_total"
    wait_until(lambda: metric(url, name) == num_rows, f"{num_rows} rows written")


def deleted_files_held(pid: int, folder: Path) -> list[str]:
    """Files under `folder` the process still has open although they were unlinked."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            continue
    return sorted(t for t in links if t.startswith(str(folder)) and t.endswith(" (deleted)"))


def test_every_row_stays_visible_to_an_outside_reader_while_the_tool_store_sweeps(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    var_dir = tmp_path / "var"
    database = var_dir / "lantern.db"
    sandbox = {"sweep_interval_s": 0.1}  # sweeps run between every two calls
    config = gateway_config(var_dir, upstream, f"sqlite:///{database}", sandbox=sandbox)
    seen = []
    with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
        with httpx.Client(timeout=30) as client:
            for n in range(NUM_CALLS):
                assert chat_call(client, gateway.url, n) is not None
                wait_written(gateway.url, n + 1)
                seen.append(outside_count(database))
        assert gateway.proc is not None
        held = deleted_files_held(gateway.proc.pid, var_dir)
        gauge = metric(gateway.url, "lantern_ledger_file_intact")
    assert (seen, held, gauge) == (list(range(1, NUM_CALLS + 1)), [], 1)
    assert outside_count(database) == NUM_CALLS  # and after the gateway stopped


def test_a_deleted_ledger_file_turns_ready_503_and_the_gauge_0(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    var_dir = tmp_path / "var"
    database = var_dir / "lantern.db"
    config = gateway_config(var_dir, upstream, f"sqlite:///{database}")
    with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
        with httpx.Client(timeout=30) as client:
            assert chat_call(client, gateway.url, 0) is not None
        wait_written(gateway.url, 1)
        before = httpx.get(gateway.url + "/ready", timeout=10)
        database.unlink()
        after = httpx.get(gateway.url + "/ready", timeout=10)
        gauge = metric(gateway.url, "lantern_ledger_file_intact")
        log = (tmp_path / "gateway.log").read_text()
    assert (before.status_code, before.json()) == (200, {"status": "ready"})
    assert (after.status_code, after.json()) == (
        503,
        {"status": "degraded", "problems": ["ledger_file_deleted"]},
    )
    assert gauge == 0
    assert f"ledger: the database file {database} was deleted" in log
