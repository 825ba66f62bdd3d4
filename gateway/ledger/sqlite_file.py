"""Whether the SQLite file the ledger writes to is still the one at its path. A database, -wal
or -shm file deleted or replaced under open connections takes every later row with it, and
SQLite says nothing. This notices it; it stats paths and reads the process's descriptor table
and never opens the database (closing a second descriptor on it would drop SQLite's locks).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy.engine import Engine

log = logging.getLogger("lantern.ledger")
FD_DIR = Path("/proc/self/fd")  # Linux; elsewhere only the database file's path is compared
DELETED = " (deleted)"  # how /proc names the target of a descriptor whose file was unlinked

MESSAGES = {
    "ledger_file_deleted": "the database file {path} was deleted",
    "ledger_file_replaced": "the database file {path} was replaced by another file",
    "ledger_wal_deleted": "the -wal or -shm file of {path} was deleted while open",
}


class LedgerFileWatch:
    """Built once the engine has made the file; `problems()` is cheap enough for each probe."""

    def __init__(self, path: Path, fd_dir: Path = FD_DIR) -> None:
        self.path = Path(os.path.realpath(path))  # as /proc names it
        info = self.path.stat()
        self._identity = (info.st_dev, info.st_ino)
        self._fd_dir = fd_dir
        self._logged: set[str] = set()

    @classmethod
    def of(cls, engine: Engine) -> LedgerFileWatch | None:
        """A watch on a SQLite ledger file; None for a server, in-memory or URI database."""
        database = engine.url.database or ""
        if engine.dialect.name != "sqlite" or database in ("", ":memory:"):
            return None
        if database.startswith("file:") or engine.url.query.get("uri"):
            return None
        return cls(Path(database).expanduser())

    def problems(self) -> tuple[str, ...]:
        """Codes of what is wrong (`MESSAGES`), each logged at ERROR the first time it is seen."""
        found = [code for code in (self._path_problem(), self._deleted_file_held()) if code]
        for code in found:
            if code not in self._logged:
                self._logged.add(code)
                detail = MESSAGES[code].format(path=self.path)
                log.error("ledger: %s; rows written from now on are lost", detail)
        return tuple(dict.fromkeys(found))

    def _path_problem(self) -> str | None:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return "ledger_file_deleted"
        if (info.st_dev, info.st_ino) != self._identity:
            return "ledger_file_replaced"
        return None

    def _deleted_file_held(self) -> str | None:
        """The -wal/-shm a reader in another process deletes once this process's locks are
        gone: connections here keep writing to it, unlinked."""
        ours = {f"{self.path}{suffix}{DELETED}" for suffix in ("-wal", "-shm")}
        try:
            names = os.listdir(self._fd_dir)
        except FileNotFoundError:
            return None
        for name in names:
            try:
                target = os.readlink(self._fd_dir / name)
            except OSError:  # closed since listed
                continue
            if target in ours:
                return "ledger_wal_deleted"
        return None
