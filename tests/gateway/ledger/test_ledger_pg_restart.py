"""A real PostgreSQL server stopped and started mid-traffic (our own throwaway cluster, never the
machine's shared one): every row recorded during the outage is in the database afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from glob import glob
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import UsageRow
from gateway.ledger.recorder import RecorderConfig, UsageRecorder

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _bindir() -> Path | None:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    return Path(found[-1]).parent if found[-1] else None


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary directory, on a free port, as the postgres user if root."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="lantern-pg-", dir="/tmp"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")
        self._run("initdb", "-D", f"{self.root}/data", "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            f"{self.root}/data",
            "-o",
            options,
            "-l",
            f"{self.root}/log",
            "-w",
            "start",
        )

    def stop(self) -> None:
        """`-m fast`: the server ends every session at once, as in a crash or failover."""
        self._run("pg_ctl", "-D", f"{self.root}/data", "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        subprocess.run(
            self._as_postgres("pg_ctl", "-D", f"{self.root}/data", "-m", "immediate", "stop"),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *argv: str) -> None:
        subprocess.run(self._as_postgres(*argv), check=True, capture_output=True, timeout=120)

    def _as_postgres(self, program: str, *args: str) -> list[str]:
        command = [str(self.bindir / program), *args]
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayPostgres]:
    bindir = _bindir()
    if bindir is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) are required in CI")
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not installed")
    server = ThrowawayPostgres(bindir)
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _wait_until(predicate, what: str, limit_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        time.sleep(0.01)


def _wait_for_count(recorder: UsageRecorder, counter: str, at_least: int) -> None:
    _wait_until(lambda: getattr(recorder.stats(), counter) >= at_least, f"{counter} >= {at_least}")


def test_server_stopped_and_restarted_mid_traffic_loses_nothing(own_postgres, make_row, tmp_path):
    migrate(own_postgres.url)
    engine = create_ledger_engine(own_postgres.url)
    config = RecorderConfig(
        spool_dir=tmp_path / "spool", batch_size=20, retry_initial_s=0.05, retry_max_s=0.2
    )
    recorder = UsageRecorder(engine, config)
    recorder.start()
    recorded: list[UsageRow] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            row = make_row(cost_usd=Decimal("0.01"))
            recorder.record(row)
            recorded.append(row)
            time.sleep(0.002)

    producer = threading.Thread(target=traffic)
    producer.start()
    try:
        for outage in (1, 2):  # the recorder must survive more than one outage
            _wait_for_count(recorder, "num_written", 50 * outage)
            spooled_target = recorder.stats().num_spooled + 50
            own_postgres.stop()
            _wait_for_count(recorder, "num_spooled", spooled_target)
            assert not recorder.stats().is_database_up
            own_postgres.start()
            _wait_until(
                lambda: recorder.stats().is_database_up and recorder.stats().spool_bytes == 0,
                "spool drained",
            )
    finally:
        stop.set()
        producer.join()
    recorder.close()
    with engine.connect() as connection:
        ids = connection.execute(sa.text("SELECT id FROM usage ORDER BY id")).scalars().all()
        total = connection.execute(sa.text("SELECT sum(cost_usd) FROM usage")).scalar_one()
    assert ids == sorted(r.id for r in recorded)
    assert total == Decimal("0.01") * len(recorded)
    assert recorder.stats().num_spooled >= 100
    engine.dispose()
