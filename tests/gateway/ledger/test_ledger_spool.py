"""The on-disk spool: per-process segments under locks, removed once stored, orphans drained,
bounded by bytes, private files."""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

from gateway.ledger.models import UsageRow
from gateway.ledger.spool import Spool


def line(row: UsageRow) -> bytes:
    return (row.to_json() + "\n").encode()


def read_ids(spool: Spool) -> list[str]:
    return [row.id for batch in spool.read_backlog(batch_size=2) for row in batch]


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("usage-*.jsonl"))


def test_a_segment_goes_once_its_rows_are_stored_and_it_is_no_longer_current(tmp_path, make_row):
    spool = Spool(tmp_path, 1 << 20, rotate_bytes=3 * len(line(make_row())))
    spool.open()
    numbers = [spool.append(line(make_row())) for _ in range(4)]
    assert numbers == [0, 0, 0, 0]
    spool.rotate_if_due()  # the first segment is full: appends go to a second one
    assert spool.append(line(make_row())) == 1
    assert len(segments(tmp_path)) == 2
    spool.acknowledge({0: 3})
    assert len(segments(tmp_path)) == 2  # one row of segment 0 is not stored yet
    spool.acknowledge({0: 1, 1: 1})
    assert len(segments(tmp_path)) == 1  # segment 1 is current: it stays, holding a stored row
    assert not spool.has_backlog
    spool.close()
    assert segments(tmp_path) == []


def test_rows_given_up_are_read_back_and_a_live_writers_segment_is_left_alone(tmp_path, make_row):
    a, b = Spool(tmp_path, 1 << 20), Spool(tmp_path, 1 << 20)
    a.open()
    b.open()
    for _ in range(3):
        a.append(line(make_row()))
    b.give_up([b.append(line(make_row()))])  # row-000003: the database did not take it
    assert b.has_backlog and not a.has_backlog
    assert read_ids(b) == ["row-000003"]  # a's segment is locked by its live writer
    b.clear_backlog()
    assert not b.has_backlog
    a.close()  # a's rows were never acknowledged: its segment stays, now an orphan
    b.release()  # re-scan the directory
    assert read_ids(b) == ["row-000000", "row-000001", "row-000002"]
    b.clear_backlog()
    b.close()
    assert segments(tmp_path) == []


def test_the_byte_bound_covers_every_segment_in_the_directory(tmp_path, make_row):
    rows = [make_row() for _ in range(4)]
    line_bytes = len(line(rows[0]))
    first = Spool(tmp_path, 10 * line_bytes)
    first.open()
    first.give_up([first.append(line(rows[0])), first.append(line(rows[1]))])
    first.close()
    second = Spool(tmp_path, 3 * line_bytes)
    second.open()
    assert second.append(line(rows[2])) == 0
    assert second.append(line(rows[3])) is None  # full: the caller keeps it in memory
    assert second.num_bytes == 3 * line_bytes
    assert second.backlog_bytes == 2 * line_bytes  # first's orphan; rows[2] is not given up
    second.close()


def test_files_are_private(tmp_path, make_row):
    directory = tmp_path / "var" / "spool"
    spool = Spool(directory, 1 << 20)
    spool.open()
    spool.append(line(make_row()))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in segments(directory)] == [0o600]
    spool.close()


def test_an_existing_open_directory_is_tightened(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    spool = Spool(directory, 1 << 20)
    spool.open()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    spool.close()


def test_a_torn_last_line_is_skipped_and_logged(tmp_path, make_row, caplog):
    rows = [make_row(), make_row()]
    text = "".join(row.to_json() + "\n" for row in rows) + make_row().to_json()[:40]
    (tmp_path / "usage-1-deadbeef.jsonl").write_text(text)
    spool = Spool(tmp_path, 1 << 20)
    spool.open()
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.spool"):
        assert read_ids(spool) == ["row-000000", "row-000001"]
    assert "usage-1-deadbeef.jsonl line 3 is torn" in caplog.text
    spool.clear_backlog()
    spool.close()
    assert list(tmp_path.iterdir()) == []


_FILLS_THE_DISK = """
import resource, signal, sys
from datetime import UTC, datetime
from pathlib import Path
from gateway.ledger.models import UsageRow
from gateway.ledger.spool import Spool

def line(i):
    row = UsageRow(id=f"row-{i:06d}", ts=datetime(2026, 11, 3, tzinfo=UTC), tenant="acme",
                   key_id="k", model="m", request_id=f"r{i}", status="ok")
    return (row.to_json() + "\\n").encode()

spool = Spool(Path(sys.argv[1]), 1 << 20)
spool.open()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (int(2.5 * len(line(0))), resource.RLIM_INFINITY))
numbers = [spool.append(line(i)) for i in range(4)]  # half of row 2 fits, then EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
numbers.append(spool.append(line(4)))  # the disk has room again
print(numbers, flush=True)
spool.give_up([0])
spool.close()
"""


def test_a_failed_append_leaves_no_half_line_behind(tmp_path, caplog):
    repo_root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _FILLS_THE_DISK, str(tmp_path)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[0, 0, None, None, 0]"
    assert f"[Errno {errno.EFBIG}]" in done.stderr  # logged, not raised into the caller
    reader = Spool(tmp_path, 1 << 20)
    reader.open()
    # Rows 2 and 3 were refused whole (kept in memory); row 4 is not glued to half a row.
    assert read_ids(reader) == ["row-000000", "row-000001", "row-000004"]
    reader.clear_backlog()
    reader.close()


def test_a_short_write_is_completed_and_a_failed_one_cut_back(tmp_path, make_row, monkeypatch):
    spool = Spool(tmp_path, 1 << 20)
    spool.open()
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: bytes) -> int:  # the first write takes 10 bytes only
        calls.append(len(data))
        return real_write(fd, bytes(data[:10]) if len(calls) == 1 else data)

    first = line(make_row())
    monkeypatch.setattr("gateway.ledger.spool.os.write", short_write)
    assert spool.append(first) == 0
    assert calls == [len(first), len(first) - 10]

    def failing_write(fd: int, data: bytes) -> int:  # half a line, then the disk is full
        if len(data) == len(second):
            return real_write(fd, bytes(data[:20]))
        raise OSError(errno.ENOSPC, "No space left on device")

    second = line(make_row())
    monkeypatch.setattr("gateway.ledger.spool.os.write", failing_write)
    assert spool.append(second) is None
    monkeypatch.setattr("gateway.ledger.spool.os.write", real_write)
    third = line(make_row())
    assert spool.append(third) == 0
    (path,) = segments(tmp_path)
    assert path.read_bytes() == first + third
    assert spool.num_bytes == len(first) + len(third)
    spool.close()
