"""The on-disk spool: every usage row as one JSON line, appended before its call's reply completes.

Each process appends to its own segment files, locked while it lives; a segment is removed once
all its rows are in the database. Segments no live process holds are drained by whoever starts
next. Bounded by bytes over the directory; files 0600 in a 0700 directory.

Durability: `append` is one write(2) without fsync. Once it returns the row is in the kernel's
page cache: it survives the death of the process (kill -9, OOM kill, a crash), not a power loss
or kernel crash. Segments holding rows the database did not take are fsynced by `give_up`.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import stat
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gateway.ledger.models import UsageRow

log = logging.getLogger(__name__)
SEGMENT_GLOB = "usage-*.jsonl"
DEFAULT_ROTATE_BYTES = 1 << 20


@dataclass(slots=True)
class _Segment:
    number: int
    path: Path
    fd: int
    num_bytes: int = 0
    num_lines: int = 0
    num_acked: int = 0  # rows of this segment the database has (from memory)
    is_dirty: bool = False  # holds rows the database did not take: read back from disk

    @property
    def is_done(self) -> bool:
        return not self.is_dirty and self.num_acked >= self.num_lines


class Spool:
    """`append` from any thread; everything else from the recorder's writer thread only."""

    def __init__(
        self, directory: Path, max_bytes: int, rotate_bytes: int = DEFAULT_ROTATE_BYTES
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.rotate_bytes = rotate_bytes
        self._lock = threading.Lock()  # guards the segments' counters and `_current`
        self._numbers = itertools.count()
        self._segments: dict[int, _Segment] = {}  # this process's, the current one last
        self._current: _Segment | None = None
        self._own_bytes = 0
        self._other_bytes = 0  # other processes' segments: they count against max_bytes
        self._orphan_bytes = 0  # segments no live process holds: this spool's to drain
        self._held: dict[Path, IO[bytes]] = {}  # orphans locked by `read_backlog`
        self._reading: list[_Segment] = []  # own segments `read_backlog` returned

    def open(self) -> None:
        private_directory(self.directory)
        segment = self._new_segment()
        with self._lock:
            self._current = segment
            self._segments[segment.number] = segment
        self._rescan()

    def close(self) -> None:
        """Releases every segment; those whose rows are all in the database are removed, the
        others wait for the next drain (of this or another process)."""
        self.release()
        with self._lock:
            self._current = None
            for segment in list(self._segments.values()):
                if segment.is_done:
                    self._remove(segment)
                else:
                    os.close(segment.fd)
                    del self._segments[segment.number]
                    self._own_bytes -= segment.num_bytes
        self._rescan()

    @property
    def is_open(self) -> bool:
        return self._current is not None

    @property
    def num_bytes(self) -> int:
        return self._other_bytes + self._own_bytes

    @property
    def backlog_bytes(self) -> int:
        """Bytes of segments whose rows wait on disk for the database."""
        with self._lock:
            own = sum(s.num_bytes for s in self._segments.values() if s.is_dirty)
        return own + self._orphan_bytes

    @property
    def has_backlog(self) -> bool:
        return self.backlog_bytes > 0

    def append(self, line: bytes) -> int | None:
        """Writes one line; returns its segment's number, or None when the spool is closed or
        full, or the write failed (the caller keeps the row in memory only)."""
        size = len(line)
        with self._lock:
            segment = self._current
            if segment is None or self._other_bytes + self._own_bytes + size > self.max_bytes:
                return None
            try:
                written = os.write(segment.fd, line)  # one write(2), the common case
                if written != size:  # a short write: the disk is nearly full
                    _write_all(segment.fd, memoryview(line)[written:])
            except OSError:
                log.exception("usage ledger: spool write failed")
                _cut_back(segment.fd, segment.num_bytes)
                return None
            segment.num_bytes += size
            segment.num_lines += 1
            self._own_bytes += size
            return segment.number

    def acknowledge(self, counts: Mapping[int, int]) -> None:
        """`counts[n]` more rows of segment `n` are in the database; segments wholly there
        (and no longer appended to) are removed."""
        with self._lock:
            for number, count in counts.items():
                segment = self._segments.get(number)
                if segment is not None:
                    segment.num_acked += count
            for segment in list(self._segments.values()):
                if segment is not self._current and segment.is_done:
                    self._remove(segment)

    def give_up(self, numbers: Iterable[int]) -> None:
        """Rows of these segments did not reach the database: the next drain reads them back
        from disk. Fsynced here, since they may wait there long."""
        newly: list[int] = []
        with self._lock:
            for number in set(numbers):
                segment = self._segments.get(number)
                if segment is not None and not segment.is_dirty:
                    segment.is_dirty = True
                    newly.append(segment.fd)
        for fd in newly:  # only this thread closes segments: the fds stay valid
            os.fsync(fd)

    def rotate_if_due(self) -> None:
        with self._lock:
            is_due = self._current is not None and self._current.num_bytes >= self.rotate_bytes
        if is_due:
            self._rotate()

    def read_backlog(self, batch_size: int) -> Iterator[list[UsageRow]]:
        """Rows of this process's dirty segments and of orphans, in batches. Those segments stay
        locked until `clear_backlog` or `release`, so no other drainer reads them meanwhile."""
        with self._lock:
            is_current_dirty = self._current is not None and self._current.is_dirty
        if is_current_dirty:
            self._rotate()  # the rows appended from now on go to a clean segment
        self._hold_orphans()
        with self._lock:
            self._reading = [
                s for s in self._segments.values() if s.is_dirty and s is not self._current
            ]
        paths = [*self._held, *(s.path for s in self._reading)]
        batch: list[UsageRow] = []
        for path in paths:
            for row in _read_segment(path):
                batch.append(row)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def clear_backlog(self) -> None:
        """Removes what `read_backlog` returned: call only once every batch is in the database."""
        for path in self._held:
            path.unlink(missing_ok=True)
        with self._lock:
            for segment in self._reading:
                if segment.number in self._segments:
                    self._remove(segment)
        self.release()

    def release(self) -> None:
        """Gives back what `read_backlog` locked, keeping it for a later drain."""
        for handle in self._held.values():
            handle.close()
        self._held = {}
        self._reading = []
        self._rescan()

    # --- internals ----------------------------------------------------------------------

    def _new_segment(self) -> _Segment:
        name = f"usage-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        # Locked under a name drainers ignore, then renamed: no drainer sees it unlocked.
        staging = self.directory / f".{name}.new"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(staging, flags, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = self.directory / name
        staging.rename(path)
        return _Segment(next(self._numbers), path, fd)

    def _rotate(self) -> None:
        segment = self._new_segment()  # file work outside the lock: appends go on meanwhile
        with self._lock:
            old, self._current = self._current, segment
            self._segments[segment.number] = segment
            if old is not None and old.is_done:
                self._remove(old)

    def _remove(self, segment: _Segment) -> None:
        """Under `_lock`."""
        segment.path.unlink(missing_ok=True)
        os.close(segment.fd)
        del self._segments[segment.number]
        self._own_bytes -= segment.num_bytes

    def _rescan(self) -> None:
        other = orphan = 0
        own = {s.path for s in self._segments.values()}
        for path in self._segment_paths():
            if path in own:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            other += size
            handle = self._held.get(path) or _lock_if_orphan(path)
            if handle is not None:
                orphan += size
                if path not in self._held:
                    handle.close()
        self._other_bytes, self._orphan_bytes = other, orphan

    def _hold_orphans(self) -> None:
        own = {s.path for s in self._segments.values()}
        for path in self._segment_paths():
            if path in own or path in self._held:
                continue
            handle = _lock_if_orphan(path)
            if handle is not None:
                self._held[path] = handle

    def _segment_paths(self) -> list[Path]:
        return sorted(self.directory.glob(SEGMENT_GLOB))


def private_directory(directory: Path) -> None:
    """`directory`, created 0700 if missing; one of ours with group or other bits is tightened."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if stat.S_IMODE(info.st_mode) & 0o077 and info.st_uid == os.geteuid():
        directory.chmod(0o700)


def _write_all(fd: int, data: memoryview) -> None:
    view = data
    while view:
        view = view[os.write(fd, view) :]


def _cut_back(fd: int, size_before: int) -> None:
    """After a failed write (disk full), the file back to `size_before`, so a half line cannot
    swallow the next one."""
    try:
        os.ftruncate(fd, size_before)
    except OSError:
        log.exception("usage ledger: spool cut back failed")


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
                # A torn last line: the writer died inside write(), before it returned.
                log.error("ledger spool %s line %d is torn; skipped", path.name, number)
                continue
            try:
                yield UsageRow.from_line(line)
            except (ValueError, TypeError, KeyError) as error:
                log.error(
                    "ledger spool %s line %d is unusable (%s), kept only in this log: %s",
                    path.name,
                    number,
                    error,
                    line.removesuffix("\n"),
                )
