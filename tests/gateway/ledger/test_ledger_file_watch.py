"""The ledger file watch against a real SQLite ledger engine in WAL: all well while it is, and
each way the file the gateway writes can go away under it (the -wal deleted by another
process's reader once this process's locks are dropped, the file deleted, the file replaced)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.ledger.db import create_ledger_engine
from gateway.ledger.sqlite_file import LedgerFileWatch


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "ledger" / "lantern.db"


@pytest.fixture
def engine(database: Path) -> Iterator[sa.Engine]:
    built = create_ledger_engine(f"sqlite:///{database}")
    with built.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    yield built
    built.dispose()


def write_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (1)"))


def read_outside(database: Path) -> None:
    code = "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('SELECT * FROM t').close()"
    subprocess.run([sys.executable, "-c", code, str(database)], check=True)


def test_all_well_while_the_file_is_the_one_written(engine: sa.Engine, database: Path) -> None:
    watch = LedgerFileWatch.of(engine)
    assert watch is not None
    write_row(engine)
    read_outside(database)  # another process reading is harmless while our locks hold
    write_row(engine)
    assert (watch.path, watch.problems()) == (database, ())


def test_a_wal_deleted_under_open_connections_is_noticed_and_logged_once(
    engine: sa.Engine, database: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watch = LedgerFileWatch.of(engine)
    assert watch is not None
    write_row(engine)
    os.close(os.open(database, os.O_RDONLY))  # what the tool-run store did: our locks drop
    read_outside(database)  # its close finds no lock of ours: it deletes -wal and -shm
    write_row(engine)
    with caplog.at_level(logging.ERROR, logger="lantern.ledger"):
        found = [watch.problems(), watch.problems()]
    assert found == [("ledger_wal_deleted",), ("ledger_wal_deleted",)]
    assert caplog.messages == [
        f"ledger: the -wal or -shm file of {database} was deleted while open; "
        "rows written from now on are lost"
    ]


def test_a_deleted_or_replaced_file_is_noticed(engine: sa.Engine, database: Path) -> None:
    watch = LedgerFileWatch.of(engine)
    assert watch is not None
    write_row(engine)
    moved = database.with_name("moved.db")
    database.rename(moved)
    deleted = watch.problems()
    database.write_bytes(moved.read_bytes())  # a restore over the open file: another inode
    assert (deleted, watch.problems()) == (("ledger_file_deleted",), ("ledger_file_replaced",))


def test_no_watch_where_there_is_no_file_of_ours() -> None:
    engines = [sa.create_engine("sqlite://"), sa.create_engine("postgresql+psycopg://u@h/db")]
    assert [LedgerFileWatch.of(engine) for engine in engines] == [None, None]
