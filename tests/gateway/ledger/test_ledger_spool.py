"""The on-disk spool: per-process segments under locks, orphans drained, bounded by bytes."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
from pathlib import Path

from gateway.ledger.spool import Spool


def read_ids(spool: Spool) -> list[str]:
    return [row.id for batch in spool.read_all(batch_size=2) for row in batch]


def test_a_live_writers_segment_is_left_alone_until_it_closes(tmp_path, make_row):
    a, b = Spool(tmp_path, 1 << 20), Spool(tmp_path, 1 << 20)
    a.open()
    b.open()
    a_rows = [make_row(), make_row(), make_row()]
    assert a.append(a_rows).num_written == 3
    b.append([make_row()])
    assert read_ids(b) == ["row-000003"]
    b.clear()
    assert b.is_empty and not a.is_empty
    a.close()  # a's process is gone: its segment is now an orphan
    b.release()  # re-scan the directory
    assert read_ids(b) == ["row-000000", "row-000001", "row-000002"]
    b.clear()
    b.close()
    assert list(tmp_path.iterdir()) == []


def test_the_byte_bound_covers_every_segment_in_the_directory(tmp_path, make_row):
    rows = [make_row() for _ in range(4)]
    line_bytes = len(rows[0].to_json()) + 1
    first = Spool(tmp_path, 10 * line_bytes)
    first.open()
    first.append(rows[:2])
    first.close()
    second = Spool(tmp_path, 3 * line_bytes)
    second.open()
    result = second.append(rows[2:])
    assert (result.num_written, result.overflow) == (1, (rows[3],))
    assert second.num_bytes == 3 * line_bytes
    second.close()


def test_a_torn_last_line_is_skipped_and_logged(tmp_path, make_row, caplog):
    rows = [make_row(), make_row()]
    text = "".join(row.to_json() + "\n" for row in rows) + make_row().to_json()[:40]
    (tmp_path / "usage-1-deadbeef.jsonl").write_text(text)
    spool = Spool(tmp_path, 1 << 20)
    spool.open()
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.spool"):
        assert read_ids(spool) == ["row-000000", "row-000001"]
    assert "usage-1-deadbeef.jsonl line 3 is torn" in caplog.text
    spool.clear()
    spool.close()
    assert list(tmp_path.iterdir()) == []


_FILLS_THE_DISK = """
import resource, signal, sys
from datetime import UTC, datetime
from pathlib import Path
from gateway.ledger.models import UsageRow
from gateway.ledger.spool import Spool

def row(i):
    return UsageRow(id=f"row-{i:06d}", ts=datetime(2026, 11, 3, tzinfo=UTC), tenant="acme",
                    key_id="k", model="m", request_id=f"r{i}", status="ok")

line_bytes = len(row(0).to_json()) + 1
spool = Spool(Path(sys.argv[1]), 1 << 20)
spool.open()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (int(2.5 * line_bytes), resource.RLIM_INFINITY))
assert spool.append([row(0), row(1)]).num_written == 2
try:
    spool.append([row(2), row(3)])  # half of row 2 fits under the limit, then EFBIG
except OSError as error:
    print("failed", error.errno, flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
assert spool.append([row(4)]).num_written == 1  # the disk has room again
spool.close()
"""


def test_a_failed_append_leaves_no_half_line_behind(tmp_path):
    repo_root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _FILLS_THE_DISK, str(tmp_path)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["failed", str(errno.EFBIG)]
    reader = Spool(tmp_path, 1 << 20)
    reader.open()
    # Rows 2 and 3 were refused whole (the recorder logs them); row 4 is not glued to half a row.
    assert read_ids(reader) == ["row-000000", "row-000001", "row-000004"]
    reader.clear()
    reader.close()
