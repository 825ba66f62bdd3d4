"""The on-disk spool: usage rows that could not reach the database, as fsynced JSON lines.

Each process appends to its own segment file, held under an exclusive lock; segments of processes
that are gone (unlocked) are drained by whoever starts next. Bounded by bytes over the directory.
Blocking file I/O: only the recorder's writer thread calls it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gateway.ledger.models import UsageRow

log = logging.getLogger(__name__)
SEGMENT_GLOB = "usage-*.jsonl"


@dataclass(frozen=True, slots=True)
class SpoolAppend:
    num_written: int
    overflow: tuple[UsageRow, ...]  # rows that did not fit under max_bytes


class Spool:
    """A directory of JSON-lines segments; `append` is durable (fsync) when it returns."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._fd: int | None = None  # own segment, O_APPEND, locked for this spool's life
        self._own_path: Path | None = None
        self._own_bytes = 0
        self._other_bytes = 0  # other segments, live or orphaned: they count against max_bytes
        self._orphan_bytes = 0  # segments no live writer holds: this spool's to drain
        self._held: dict[Path, IO[bytes]] = {}

    def open(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"usage-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        # Locked under a name drainers ignore, then renamed: no drainer sees it unlocked.
        staging = self.directory / f".{name}.new"
        self._fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._own_bytes = 0
        self._own_path = self.directory / name
        staging.rename(self._own_path)
        self._fsync_directory()
        self._rescan()

    def close(self) -> None:
        """Releases the segment; an empty one is removed, a full one waits for the next drain."""
        self.release()
        if self._fd is None or self._own_path is None:
            return
        if self._own_bytes == 0:
            self._own_path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        self._own_path = None
        self._own_bytes = 0
        self._rescan()

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def num_bytes(self) -> int:
        return self._other_bytes + self._own_bytes

    @property
    def is_empty(self) -> bool:
        """Nothing for this spool to drain (live writers' segments are theirs)."""
        return self._own_bytes == 0 and self._orphan_bytes == 0

    def append(self, rows: list[UsageRow]) -> SpoolAppend:
        fd = self._require_open()
        lines = [(row.to_json() + "\n").encode() for row in rows]
        room = self.max_bytes - self.num_bytes
        fitting: list[bytes] = []
        for line in lines:
            if len(line) > room:
                break
            fitting.append(line)
            room -= len(line)
        if fitting:
            self._write_durably(fd, b"".join(fitting))
        return SpoolAppend(len(fitting), tuple(rows[len(fitting) :]))

    def _write_durably(self, fd: int, data: bytes) -> None:
        """All of `data`, fsynced; on failure (disk full) the segment is cut back to where it
        was, so a half-written line cannot swallow the next one."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, self._own_bytes)
            raise
        self._own_bytes += len(data)

    def read_all(self, batch_size: int) -> Iterator[list[UsageRow]]:
        """Every spooled row (own segment and orphaned ones), in batches.

        Orphans are locked here and stay locked until `clear` or `release`, so no other drainer
        reads them at the same time.
        """
        self._hold_orphans()
        paths = [*self._held, *([self._own_path] if self._own_path is not None else [])]
        batch: list[UsageRow] = []
        for path in paths:
            for row in _read_segment(path):
                batch.append(row)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def clear(self) -> None:
        """Forgets what `read_all` returned: call only after every batch is in the database."""
        fd = self._require_open()
        for path in self._held:
            path.unlink(missing_ok=True)
        os.ftruncate(fd, 0)  # O_APPEND: the next write lands at the new end
        os.fsync(fd)
        self._own_bytes = 0
        self._fsync_directory()
        self.release()

    def release(self) -> None:
        """Gives back the orphans `read_all` locked, keeping them for a later drain."""
        for handle in self._held.values():
            handle.close()
        self._held = {}
        self._rescan()

    def _rescan(self) -> None:
        self._other_bytes = self._orphan_bytes = 0
        for path in self._segments():
            if path == self._own_path:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            self._other_bytes += size
            handle = self._held.get(path) or _lock_if_orphan(path)
            if handle is not None:
                self._orphan_bytes += size
                if path not in self._held:
                    handle.close()

    def _hold_orphans(self) -> None:
        for path in self._segments():
            if path == self._own_path or path in self._held:
                continue
            handle = _lock_if_orphan(path)
            if handle is not None:
                self._held[path] = handle

    def _segments(self) -> list[Path]:
        return sorted(self.directory.glob(SEGMENT_GLOB))

    def _require_open(self) -> int:
        if self._fd is None:
            raise RuntimeError("spool is not open")
        return self._fd

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _lock_if_orphan(path: Path) -> IO[bytes] | None:
    """The segment, locked, when no live writer holds it; else None."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - returned locked to the caller
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _read_segment(path: Path) -> Iterator[UsageRow]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith("\n"):
                # A torn last line: the writer died inside write(), before fsync acknowledged it.
                log.error("ledger spool %s line %d is torn; skipped", path.name, number)
                continue
            try:
                yield UsageRow.from_json(line)
            except (ValueError, TypeError, KeyError):
                log.error("ledger spool %s line %d is unreadable; skipped", path.name, number)
