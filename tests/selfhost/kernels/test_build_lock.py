"""A build lock left by a process killed while compiling must not hang every later engine start."""

from __future__ import annotations

import os
from pathlib import Path

from selfhost.kernels.cpu.loader import STALE_LOCK_S, clear_stale_lock


def test_a_stale_lock_is_removed_and_a_fresh_one_kept(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.touch()
    now = lock.stat().st_mtime
    assert clear_stale_lock(tmp_path, now=now + STALE_LOCK_S - 1) is False  # a build may be running
    assert lock.exists()
    assert clear_stale_lock(tmp_path, now=now + STALE_LOCK_S + 1) is True
    assert not lock.exists()


def test_no_lock_is_nothing_to_do(tmp_path: Path) -> None:
    assert clear_stale_lock(tmp_path) is False
    assert os.listdir(tmp_path) == []
