"""Engines for the ledger database and its schema, which only ever comes from Alembic migrations.

SQLite (WAL; the file 0600, a missing parent directory 0700) by default; PostgreSQL through psycopg 3. Sync API: async
callers run these in a thread.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 5000
POSTGRES_CONNECT_TIMEOUT_S = 5
POSTGRES_STATEMENT_TIMEOUT_MS = 30000
MIGRATION_LOCK_KEY = 0x4C414E5445524E  # "LANTERN": one advisory lock for ledger migrations


def create_ledger_engine(database_url: str) -> Engine:
    """An engine for `database_url`; `postgresql://` URLs are served by psycopg 3."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    if url.get_backend_name() == "postgresql":
        return _postgres_engine(url)
    raise ValueError(f"unsupported ledger database: {url.get_backend_name()}")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def migrate(database_url: str, revision: str = "head") -> None:
    """Bring the ledger schema to `revision` (idempotent; safe at every start-up)."""
    engine = create_ledger_engine(database_url)
    try:
        migrate_engine(engine, revision)
    finally:
        engine.dispose()


def migrate_engine(engine: Engine, revision: str = "head") -> None:
    """Upgrade under a lock, so gateway processes starting together migrate one at a time."""
    config = alembic_config()
    with _sqlite_file_lock(engine), engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database or ""
    if (
        engine.dialect.name != "sqlite"
        or database in ("", ":memory:")
        or database.startswith("file:")
    ):
        yield
        return
    fd = os.open(f"{database}.migrate-lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def private_file(path: Path) -> None:
    """The SQLite file, created 0600 before SQLite opens it (SQLite gives its -wal and -shm
    files the database file's mode); missing parent directories are created 0700. An existing
    file of ours with group or other bits, and its -wal/-shm, are tightened."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            info = file.stat()
        except FileNotFoundError:
            continue
        if stat.S_IMODE(info.st_mode) & 0o077 and info.st_uid == os.geteuid():
            file.chmod(0o600)


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _sqlite_engine(url: sa.URL) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        private_file(Path(database).expanduser())
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    return engine


def _postgres_engine(url: sa.URL) -> Engine:
    if url.drivername in {"postgresql", "postgres"}:
        url = url.set(drivername="postgresql+psycopg")
    engine = sa.create_engine(
        url,
        pool_pre_ping=True,  # a connection that died in an outage is replaced, not reused
        pool_size=4,  # the recorder's writer, admin reports, start-up seeding
        max_overflow=4,
        pool_timeout=POSTGRES_CONNECT_TIMEOUT_S,
        connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S},
    )

    @sa.event.listens_for(engine, "connect")
    def _timeouts(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET statement_timeout = {POSTGRES_STATEMENT_TIMEOUT_MS}")
        dbapi_connection.commit()

    return engine
