"""UsageRecorder: never blocks the caller, never loses a row through a real database outage."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from gateway.ledger.db import create_ledger_engine, migrate, migrate_engine
from gateway.ledger.metrics import RecorderCollector
from gateway.ledger.models import UsageRow
from gateway.ledger.recorder import RecorderConfig, UsageRecorder

REPO_ROOT = Path(__file__).resolve().parents[3]


def wait_until(predicate: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    """Polls `predicate`; the limit only keeps a broken build from hanging (not a timing test)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        time.sleep(0.01)


def fast_retry(spool_dir: Path, **overrides: object) -> RecorderConfig:
    values: dict[str, object] = {
        "spool_dir": spool_dir,
        "retry_initial_s": 0.05,
        "retry_max_s": 0.2,
    }
    values.update(overrides)
    return RecorderConfig(**values)  # type: ignore[arg-type]


def stored(engine: sa.Engine) -> tuple[list[str], Decimal]:
    with engine.connect() as connection:
        ids = connection.execute(sa.text("SELECT id FROM usage ORDER BY id")).scalars().all()
        total = connection.execute(sa.text("SELECT sum(cost_usd) FROM usage")).scalar_one()
    return list(ids), Decimal(str(total or 0)).quantize(Decimal("0.01"))


def test_every_row_reaches_the_database(engine, make_row, tmp_path, count_rows):
    recorder = UsageRecorder(engine, RecorderConfig(spool_dir=tmp_path / "spool", batch_size=64))
    recorder.start()
    rows = [make_row(cost_usd=Decimal("0.015")) for _ in range(300)]
    for row in rows:
        recorder.record(row)
    recorder.close()
    assert stored(engine) == (sorted(r.id for r in rows), Decimal("4.50"))
    stats = recorder.stats()
    assert (stats.num_recorded, stats.num_written, stats.num_spooled, stats.num_pending) == (
        300,
        300,
        0,
        0,
    )
    assert list((tmp_path / "spool").iterdir()) == []


def test_a_full_batch_or_close_ends_the_writers_linger(engine, make_row, tmp_path, count_rows):
    """The writer lingers for more rows once woken; a full batch is written without waiting
    the linger out, and `close()` writes what waits at once (a minute's linger here: either
    would time the test out)."""
    config = RecorderConfig(spool_dir=tmp_path / "spool", batch_size=3, linger_s=60.0)
    recorder = UsageRecorder(engine, config)
    recorder.start()
    recorder.record(make_row())  # wakes the writer, which lingers for more
    time.sleep(0.5)
    recorder.record(make_row())
    recorder.record(make_row())  # a full batch
    deadline = time.monotonic() + 20
    while count_rows(engine) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count_rows(engine) == 3
    recorder.record(make_row())  # one row: the writer lingers for more
    time.sleep(0.5)
    closing = threading.Thread(target=recorder.close)
    closing.start()
    closing.join(timeout=20)
    assert not closing.is_alive()
    assert count_rows(engine) == 4


def test_a_row_recorded_after_close_is_logged_whole_not_raised(engine, make_row, tmp_path, caplog):
    recorder = UsageRecorder(engine, RecorderConfig(spool_dir=tmp_path / "spool"))
    recorder.start()
    recorder.close()
    late = make_row()
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.recorder"):
        recorder.record(late)
    assert [r.getMessage() for r in caplog.records] == [
        f"usage ledger: recorder already closed, row kept only in this log: {late.to_json()}"
    ]
    assert (recorder.stats().num_recorded, recorder.stats().num_overflowed) == (1, 1)


class Blackhole:
    """Accepts TCP connections and never answers: a database that hangs mid-connect."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.has_client = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)
            self.has_client.set()

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone would leave the
        # socket listening until that call returns.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.postgres
def test_record_returns_while_the_writer_is_stuck_in_database_io(make_row, tmp_path, postgres_url):
    hole = Blackhole()
    stuck_url = sa.make_url(postgres_url).set(host="127.0.0.1", port=hole.port)
    stuck = create_ledger_engine(stuck_url.render_as_string(hide_password=False))
    spool_dir = tmp_path / "spool"
    recorder = UsageRecorder(stuck, fast_retry(spool_dir))
    recorder.start()
    first = make_row()
    recorder.record(first)
    assert hole.has_client.wait(timeout=30), "the writer never tried the database"
    # The writer thread is now blocked inside connect(); the caller's thread is unaffected.
    rows = [make_row() for _ in range(1000)]
    for row in rows:
        recorder.record(row)
    stats = recorder.stats()
    assert (stats.num_recorded, stats.num_pending, stats.num_written) == (1001, 1000, 0)
    hole.close()  # the hang ends in a failed connection: everything goes to the spool
    recorder.close()
    assert recorder.stats().num_spooled == 1001
    # A recorder on another (working) database drains that spool: rows are dialect-free.
    sqlite_url = f"sqlite:///{tmp_path}/other.db"
    migrate(sqlite_url)
    working = create_ledger_engine(sqlite_url)
    drainer = UsageRecorder(working, fast_retry(spool_dir))
    drainer.start()
    drainer.close()
    assert stored(working)[0] == sorted([first.id, *(r.id for r in rows)])
    stuck.dispose()
    working.dispose()


@pytest.mark.postgres
def test_outage_mid_traffic_loses_and_duplicates_nothing(
    pg_proxy, postgres_url, make_row, tmp_path, count_rows
):
    proxy, proxied_url = pg_proxy
    migrate(postgres_url)
    direct = create_ledger_engine(postgres_url)
    through_proxy = create_ledger_engine(proxied_url)
    recorder = UsageRecorder(through_proxy, fast_retry(tmp_path / "spool", batch_size=20))
    recorder.start()
    recorded: list[UsageRow] = []
    stop = threading.Event()

    def traffic() -> None:  # a steady stream of calls finishing, as the pipeline would make
        while not stop.is_set():
            row = make_row(cost_usd=Decimal("0.01"))
            recorder.record(row)
            recorded.append(row)
            time.sleep(0.002)

    producer = threading.Thread(target=traffic)
    producer.start()
    wait_until(lambda: recorder.stats().num_written >= 50, "rows written before the outage")
    proxy.cut()
    wait_until(lambda: recorder.stats().num_spooled >= 100, "rows spooled during the outage")
    assert not recorder.stats().is_database_up
    in_db_during_outage = count_rows(direct)
    proxy.restore()
    wait_until(
        lambda: recorder.stats().is_database_up and recorder.stats().spool_bytes == 0,
        "the spool drained after the database returned",
    )
    num_at_recovery = recorder.stats().num_recorded
    wait_until(
        lambda: recorder.stats().num_recorded >= num_at_recovery + 50, "traffic after recovery"
    )
    stop.set()
    producer.join()
    recorder.close()
    ids, total = stored(direct)
    assert ids == sorted(r.id for r in recorded)  # all present, none twice
    assert total == Decimal("0.01") * len(recorded)
    assert in_db_during_outage < len(recorded)  # the outage really kept rows out
    assert recorder.stats().num_overflowed == 0
    direct.dispose()
    through_proxy.dispose()


_CRASHING_WRITER = """
import sys, time
from datetime import UTC, datetime
from pathlib import Path
from gateway.ledger.db import create_ledger_engine
from gateway.ledger.models import UsageRow
from gateway.ledger.recorder import RecorderConfig, UsageRecorder

url, spool_dir, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
config = RecorderConfig(spool_dir=spool_dir, retry_initial_s=0.05, retry_max_s=0.2)
recorder = UsageRecorder(create_ledger_engine(url), config)
recorder.start()
for i in range(n):
    recorder.record(UsageRow(
        id=f"crash-{i:04d}", ts=datetime(2026, 11, 3, tzinfo=UTC), tenant="acme", key_id="k",
        model="m", request_id=f"r{i}", status="ok", cost_usd="0.02", output_tokens=7))
while recorder.stats().num_spooled < n:
    time.sleep(0.01)
print("spooled", recorder.stats().num_spooled, flush=True)
time.sleep(600)
"""


@pytest.mark.postgres
def test_spool_survives_a_killed_process(pg_proxy, postgres_url, tmp_path):
    proxy, proxied_url = pg_proxy
    migrate(postgres_url)
    proxy.cut()  # the database is unreachable for the whole life of the first process
    spool_dir = tmp_path / "spool"
    process = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_WRITER, proxied_url, str(spool_dir), "40"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().split() == ["spooled", "40"]
    finally:
        process.kill()  # no close(), no flush: only what reached the disk survives
        process.wait()
    proxy.restore()
    engine = create_ledger_engine(proxied_url)
    recorder = UsageRecorder(engine, fast_retry(spool_dir))
    recorder.start()  # drains the dead process's segment
    recorder.close()
    assert stored(engine) == ([f"crash-{i:04d}" for i in range(40)], Decimal("0.80"))
    assert list(spool_dir.glob("*.jsonl")) == []
    engine.dispose()


def test_rows_wait_in_the_spool_until_the_schema_exists(sqlite_url, make_row, tmp_path):
    engine = create_ledger_engine(sqlite_url)  # not migrated: every insert fails
    spool_dir = tmp_path / "spool"
    recorder = UsageRecorder(engine, fast_retry(spool_dir))
    recorder.start()
    rows = [make_row() for _ in range(25)]
    for row in rows:
        recorder.record(row)
    recorder.close()
    assert recorder.stats().num_spooled == 25
    migrate(sqlite_url)
    again = UsageRecorder(engine, fast_retry(spool_dir))
    again.start()
    again.close()
    assert stored(engine)[0] == sorted(r.id for r in rows)
    engine.dispose()


def test_rows_wait_in_the_spool_until_prepare_succeeds(sqlite_url, make_row, tmp_path):
    engine = create_ledger_engine(sqlite_url)  # not migrated: `prepare` does it
    tries: list[int] = []

    def prepare(db: sa.Engine) -> None:  # the database answers from the third try on
        tries.append(len(tries) + 1)
        if len(tries) < 3:
            raise OSError("database unreachable")
        migrate_engine(db)

    recorder = UsageRecorder(engine, fast_retry(tmp_path / "spool"), prepare=prepare)
    recorder.start()
    assert recorder.wait_first_drain(60)
    assert not recorder.stats().is_database_up
    rows = [make_row() for _ in range(30)]
    for row in rows:
        recorder.record(row)
    wait_until(lambda: recorder.stats().num_written == 30, "rows written once prepared")
    recorder.close()
    assert stored(engine)[0] == sorted(r.id for r in rows)
    assert tries == [1, 2, 3]
    stats = recorder.stats()
    assert (stats.num_spooled, stats.spool_bytes, stats.is_database_up) == (30, 0, True)
    assert list((tmp_path / "spool").glob("*.jsonl")) == []
    engine.dispose()


def test_a_full_spool_logs_each_overflow_row_whole_and_counts_it(
    sqlite_url, make_row, tmp_path, caplog
):
    engine = create_ledger_engine(sqlite_url)  # not migrated: the database refuses every row
    line_bytes = len(make_row().to_json()) + 1
    recorder = UsageRecorder(engine, fast_retry(tmp_path / "spool", spool_max_bytes=3 * line_bytes))
    rows = [make_row() for _ in range(5)]
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.recorder"):
        recorder.start()
        for row in rows:
            recorder.record(row)
        recorder.close()
    stats = recorder.stats()
    assert (stats.num_spooled, stats.num_overflowed) == (3, 2)
    logged = [
        r.getMessage().split("log: ", 1)[1]
        for r in caplog.records
        if "spool full" in r.getMessage()
    ]
    assert [UsageRow.from_json(text) for text in logged] == rows[3:]
    engine.dispose()


def test_a_row_the_database_refuses_does_not_hold_back_the_others(
    engine, make_row, tmp_path, caplog
):
    good = [make_row() for _ in range(3)]
    bad = make_row()
    object.__setattr__(bad, "key_id", None)  # slips past UsageRow's checks; NOT NULL refuses it
    recorder = UsageRecorder(engine, fast_retry(tmp_path / "spool"))
    for row in (good[0], bad, good[1], good[2]):
        recorder.record(row)  # queued before start: the writer takes them as one batch
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.recorder"):
        recorder.start()
        recorder.close()
    assert stored(engine)[0] == sorted(r.id for r in good)
    stats = recorder.stats()
    assert (stats.num_written, stats.num_rejected, stats.num_spooled) == (3, 1, 0)
    assert [r.getMessage().split("log: ", 1)[1] for r in caplog.records] == [bad.to_json()]


def test_a_batch_whose_every_row_is_refused_leaves_the_database_up(
    engine, make_row, tmp_path, caplog
):
    bad = make_row()
    object.__setattr__(bad, "key_id", None)
    recorder = UsageRecorder(engine, fast_retry(tmp_path / "spool"))
    recorder.record(bad)  # queued before start: the writer's first batch is this row alone
    with caplog.at_level(logging.WARNING, logger="gateway.ledger.recorder"):
        recorder.start()
        recorder.close()
    stats = recorder.stats()
    assert (stats.num_written, stats.num_rejected, stats.num_spooled) == (0, 1, 0)
    assert stats.is_database_up
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert list((tmp_path / "spool").glob("usage-*.jsonl")) == []


def test_prometheus_collector_reports_the_recorder(sqlite_url, make_row, tmp_path):
    engine = create_ledger_engine(sqlite_url)  # not migrated: rows go to the spool
    line_bytes = len(make_row().to_json()) + 1
    recorder = UsageRecorder(engine, fast_retry(tmp_path / "spool", spool_max_bytes=2 * line_bytes))
    registry = CollectorRegistry()
    registry.register(RecorderCollector(recorder))
    recorder.start()
    for _ in range(3):
        recorder.record(make_row())
    recorder.close()
    lines = [
        line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")
    ]
    assert lines == [
        "lantern_ledger_rows_recorded_total 3.0",
        "lantern_ledger_rows_written_total 0.0",
        "lantern_ledger_rows_spooled_total 2.0",
        "lantern_ledger_rows_overflowed_total 1.0",
        "lantern_ledger_rows_rejected_total 0.0",
        "lantern_ledger_rows_pending 0.0",
        f"lantern_ledger_spool_bytes {2.0 * line_bytes}",
        "lantern_ledger_database_up 0.0",
    ]
    engine.dispose()
