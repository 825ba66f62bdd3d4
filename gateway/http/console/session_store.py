"""The console's logins in the ledger database (`console_sessions`), which every gateway process
of a deployment shares (one SQLite file, or PostgreSQL), as it shares `api_keys`: a logout on
one process closes the session on all. Only cookie hashes are stored. Sync database I/O: async
callers use a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.models import ConsoleSessionRecord


@dataclass(frozen=True, slots=True)
class StoredSession:
    admin_hmac: str
    expires_at: datetime


class ConsoleSessionStore:
    def __init__(self, sessions: sessionmaker[Session], max_sessions: int) -> None:
        self._sessions = sessions
        self._max_sessions = max_sessions

    def open(self, cookie_sha256: str, admin_hmac: str, now: datetime, expires: datetime) -> None:
        """Store a login; expired ones, those of another admin token and the oldest beyond
        `max_sessions` go in the same transaction, so the table stays bounded."""
        s = ConsoleSessionRecord
        with self._sessions.begin() as session:
            session.execute(
                sa.delete(s).where((s.expires_at <= now) | (s.admin_hmac != admin_hmac))
            )
            kept = (
                sa.select(s.cookie_sha256)
                .order_by(s.created_at.desc(), s.cookie_sha256)
                .limit(self._max_sessions - 1)
            )
            session.execute(sa.delete(s).where(s.cookie_sha256.not_in(kept.scalar_subquery())))
            session.add(s(cookie_sha256=cookie_sha256, admin_hmac=admin_hmac, created_at=now,
                          expires_at=expires))  # fmt: skip

    def find(self, cookie_sha256: str) -> StoredSession | None:
        with self._sessions() as session:
            found = session.get(ConsoleSessionRecord, cookie_sha256)
            return None if found is None else StoredSession(found.admin_hmac, found.expires_at)

    def close(self, cookie_sha256: str) -> None:
        s = ConsoleSessionRecord
        with self._sessions.begin() as session:
            session.execute(sa.delete(s).where(s.cookie_sha256 == cookie_sha256))
