"""The idempotency store: one row per (tenant, key) in the gateway's SQL database.

A claim is an INSERT that only one caller can win (the unique key decides, never a
SELECT-then-INSERT); every later transition is fenced by `fence`, which rises on each
takeover, so a worker that lost its lease writes nothing. No HTTP, no runners here.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa

from sandbox.errors import IdempotencyKeyInUse, ToolStoreUnavailable

metadata = sa.MetaData()

tool_runs = sa.Table(
    "lantern_tool_runs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("idem_key", sa.String(255), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("tool", sa.String(128), nullable=False),
    sa.Column("runner", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # claimed | started | done
    sa.Column("fence", sa.Integer, nullable=False),
    sa.Column("lease_expires_at", sa.Float, nullable=False),
    sa.Column("backend_ref", sa.Text, nullable=True),
    sa.Column("http_status", sa.Integer, nullable=True),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.UniqueConstraint("tenant", "idem_key", name="uq_lantern_tool_runs_tenant_key"),
)


SQLITE_BUSY_TIMEOUT_S = 30  # a writer waits this long for another process's write to commit
CONNECT_TIMEOUT_S = 5  # an unreachable server database answers 503 after this, not a hung call


def create_store_engine(database_url: str) -> sa.Engine:
    """The store's own pool: tool runs hold rows for seconds, the ledger never waits on them.
    The gateway and the tests build it here alike. A SQLite file is the store's alone (never
    the ledger's: see `docs/ledger.md`), made 0600 before SQLite opens it, and runs in WAL."""
    url = sa.make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return sa.create_engine(
            url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}
        )
    _private_sqlite_file(url)
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    sa.event.listen(engine, "connect", _wal_mode)
    return engine


def _private_sqlite_file(url: sa.URL) -> None:
    """Owner-only permissions on a SQLite database file (SQLite gives its journal and WAL
    files the database's own mode). Only here, before any connection: closing a descriptor
    of a file drops every POSIX lock this process holds on it, SQLite's included, and then
    another process's reader deletes the -wal that open connections still write to."""
    if url.database in (None, "", ":memory:") or url.query.get("uri"):
        return
    if url.database.startswith("file:"):
        return  # a URI filename: SQLite opens it as it says; nothing to create here
    path = os.path.expanduser(url.database)
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    descriptor = os.open(path, os.O_CREAT | os.O_RDONLY | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


def _wal_mode(dbapi_connection: Any, _record: Any) -> None:
    """Readers never wait for a writer, nor a writer for readers (several gateway processes)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


@contextmanager
def _unavailable_as_typed() -> Iterator[None]:
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise ToolStoreUnavailable() from exc


def create_tables(engine: sa.Engine) -> None:
    """Create the table if missing; the gateway calls this at start-up. Several processes
    may race to create it: losing that race is fine once the table exists. Opens the
    database only through `engine` (build it with `create_store_engine`)."""
    try:
        metadata.create_all(engine, tables=[tool_runs])
    except sa.exc.DBAPIError:
        if not sa.inspect(engine).has_table(tool_runs.name):
            raise


@dataclass(frozen=True)
class RunRecord:
    id: str
    tenant: str
    idem_key: str
    fingerprint: str
    tool: str
    runner: str
    state: str
    fence: int
    lease_expires_at: float
    backend_ref: str | None
    http_status: int | None
    response: str | None
    created_at: float
    expires_at: float


ClaimKind = Literal["new", "replay", "mismatch", "in_use", "stale"]


@dataclass(frozen=True)
class Claim:
    """`new`: ours, fenced by record.fence. `stale`: a lease ran out (state says how far the
    run got); `in_use`: a live lease; `replay`/`mismatch`: a finished or different request."""

    kind: ClaimKind
    record: RunRecord


class IdempotencyStore:
    def __init__(
        self,
        engine: sa.Engine,
        clock: Callable[[], float],
        lease_s: float = 30.0,
        retention_s: float = 24 * 3600.0,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self.lease_s = lease_s
        self.retention_s = retention_s
        self._has_table = False

    @contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        """A transaction; an unreachable database raises `ToolStoreUnavailable` (503), and
        the table is created on first use when start-up could not reach the database."""
        with _unavailable_as_typed():
            self._ensure_table()
            with self._engine.begin() as conn:
                yield conn

    @contextmanager
    def _connect(self) -> Iterator[sa.Connection]:
        with _unavailable_as_typed():
            self._ensure_table()
            with self._engine.connect() as conn:
                yield conn

    def _ensure_table(self) -> None:
        if not self._has_table:
            create_tables(self._engine)
            self._has_table = True

    def claim(self, tenant: str, key: str, fingerprint: str, tool: str, runner: str) -> Claim:
        for _ in range(3):
            now = self._clock()
            record = RunRecord(
                id=uuid.uuid4().hex,
                tenant=tenant,
                idem_key=key,
                fingerprint=fingerprint,
                tool=tool,
                runner=runner,
                state="claimed",
                fence=1,
                lease_expires_at=now + self.lease_s,
                backend_ref=None,
                http_status=None,
                response=None,
                created_at=now,
                expires_at=now + self.retention_s,
            )
            try:
                with self._begin() as conn:
                    conn.execute(tool_runs.insert().values(dataclasses.asdict(record)))
                return Claim("new", record)
            except sa.exc.IntegrityError:
                pass
            existing = self.find(tenant, key)
            if existing is None:
                continue  # deleted between our insert and read: try again
            if existing.state == "done" and existing.expires_at <= now:
                self._delete_expired(existing.id, now)
                continue
            return Claim(self._classify(existing, fingerprint, now), existing)
        # the key's row came and went three times (released or swept as we looked): busy
        raise IdempotencyKeyInUse("this Idempotency-Key is changing hands; retry")

    @staticmethod
    def _classify(record: RunRecord, fingerprint: str, now: float) -> ClaimKind:
        if record.fingerprint != fingerprint:
            return "mismatch"
        if record.state == "done":
            return "replay"
        return "in_use" if record.lease_expires_at > now else "stale"

    def find(self, tenant: str, key: str) -> RunRecord | None:
        query = tool_runs.select().where(tool_runs.c.tenant == tenant, tool_runs.c.idem_key == key)
        return self._one(query)

    def get(self, tenant: str, run_id: str) -> RunRecord | None:
        query = tool_runs.select().where(tool_runs.c.tenant == tenant, tool_runs.c.id == run_id)
        return self._one(query)

    def _one(self, query: sa.Select) -> RunRecord | None:
        with self._connect() as conn:
            row = conn.execute(query).mappings().first()
        return None if row is None else RunRecord(**row)

    def take_over(self, record: RunRecord) -> RunRecord | None:
        """Win a stale run with the next fence; None when another worker won it first."""
        values = {"fence": record.fence + 1, "lease_expires_at": self._clock() + self.lease_s}
        if not self._fenced(record.id, record.fence, values):
            return None
        return self.get(record.tenant, record.id)

    def mark_started(self, run_id: str, fence: int, backend_ref: str | None) -> bool:
        """Durably record that the side effect may begin (before spawning or RunTask)."""
        lease = self._clock() + self.lease_s
        return self._fenced(
            run_id,
            fence,
            {"state": "started", "backend_ref": backend_ref, "lease_expires_at": lease},
        )

    def set_ref(self, run_id: str, fence: int, backend_ref: str) -> bool:
        return self._fenced(run_id, fence, {"backend_ref": backend_ref})

    def renew(self, run_id: str, fence: int) -> bool:
        return self._fenced(run_id, fence, {"lease_expires_at": self._clock() + self.lease_s})

    def complete(self, run_id: str, fence: int, http_status: int, response: str) -> bool:
        now = self._clock()
        values = {
            "state": "done",
            "http_status": http_status,
            "response": response,
            "expires_at": now + self.retention_s,
        }
        return self._fenced(run_id, fence, values)

    def release(self, run_id: str, fence: int) -> bool:
        """Forget a claim whose run never began (validation or launch refused)."""
        statement = tool_runs.delete().where(
            tool_runs.c.id == run_id, tool_runs.c.fence == fence, tool_runs.c.state != "done"
        )
        with self._begin() as conn:
            return conn.execute(statement).rowcount == 1

    def sweep(self) -> int:
        """Delete finished rows past retention, and rows whose owner stopped renewing their
        lease over a retention ago: a dead gateway's run that nobody retried or read. Such a
        run ended, at the latest, when its lease ran out (a started one as `outcome_unknown`,
        which a retry or a GET records); it is kept as long as a finished one, then forgotten.
        One statement per row kind: a lease renewed or taken over meanwhile keeps its row."""
        now = self._clock()
        finished = tool_runs.delete().where(
            tool_runs.c.state == "done", tool_runs.c.expires_at <= now
        )
        abandoned = tool_runs.delete().where(
            tool_runs.c.state != "done",
            tool_runs.c.lease_expires_at <= now - self.retention_s,
        )
        with self._begin() as conn:
            return conn.execute(finished).rowcount + conn.execute(abandoned).rowcount

    def _delete_expired(self, run_id: str, now: float) -> None:
        statement = tool_runs.delete().where(
            tool_runs.c.id == run_id, tool_runs.c.state == "done", tool_runs.c.expires_at <= now
        )
        with self._begin() as conn:
            conn.execute(statement)

    def _fenced(self, run_id: str, fence: int, values: Mapping[str, object]) -> bool:
        statement = (
            tool_runs.update()
            .where(
                tool_runs.c.id == run_id, tool_runs.c.fence == fence, tool_runs.c.state != "done"
            )
            .values(values)
        )
        with self._begin() as conn:
            return conn.execute(statement).rowcount == 1
