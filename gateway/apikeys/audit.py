"""The `admin_audit` table: the row each change to a key adds in its own transaction, the log
as the console shows it, and the mark every process polls to learn that keys changed. Rows are
only ever added (a pruned key's rows stay). Sync database I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.models import AdminAuditRecord

MAX_AUDIT_ROWS = 500
_CHANGE_MARK_SQL = f"SELECT count(*), max(id) FROM {AdminAuditRecord.__tablename__}"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    ts: datetime
    actor: str
    action: str
    target: str
    detail: str


def audit_row(
    ts: datetime, actor: str, action: str, target: str, detail: object
) -> AdminAuditRecord:
    text = json.dumps(detail, default=str, sort_keys=True)[:2048]
    return AdminAuditRecord(ts=ts, actor=actor[:128], action=action, target=target, detail=text)


def read_audit_log(sessions: sessionmaker[Session], limit: int = 100) -> list[AuditEntry]:
    """The latest `limit` rows (at most MAX_AUDIT_ROWS), newest first."""
    query = (
        sa.select(AdminAuditRecord)
        .order_by(AdminAuditRecord.ts.desc(), AdminAuditRecord.id.desc())
        .limit(min(max(limit, 1), MAX_AUDIT_ROWS))
    )
    with sessions() as session:
        return [
            AuditEntry(r.ts, r.actor, r.action, r.target, r.detail) for r in session.scalars(query)
        ]


def change_mark(engine: sa.Engine) -> tuple[int, int | None]:
    """(audit rows, the highest audit id): every issue, expiry, revocation and prune adds a row in
    its own transaction and none is ever deleted, so the pair moves whenever `api_keys` may
    have (the count also when ids commit out of order).

    Every process polls it every second, so it is read on the DBAPI cursor of a pooled
    connection (through an ORM session a read cost ~1 ms of CPU on an idle process), given
    back at once (held, it made the pool open another, which recreates a SQLite file deleted
    under the gateway instead of reporting it) after ending the read's transaction (a SQLite
    reader must not hold the WAL back). A database error is raised as SQLAlchemy's."""
    try:  # `raw_connection` raises the driver's own errors, as the cursor does
        conn = engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as error:
        raise sa.exc.OperationalError(_CHANGE_MARK_SQL, None, error) from error
    try:
        cursor = conn.cursor()
        try:
            cursor.execute(_CHANGE_MARK_SQL)
            count, highest = cursor.fetchone() or (0, None)  # an aggregate: one row
        finally:
            cursor.close()
        conn.rollback()
    except engine.dialect.loaded_dbapi.Error as error:
        conn.invalidate()  # broken: not back into the pool
        raise sa.exc.OperationalError(_CHANGE_MARK_SQL, None, error) from error
    finally:
        conn.close()
    return int(count), None if highest is None else int(highest)
