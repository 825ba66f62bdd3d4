"""What is still running on this host: processes whose command line holds a test's marker."""

from __future__ import annotations

from pathlib import Path


def leftovers(marker: str) -> list[int]:
    """Pids of processes whose command line contains `marker` (none once a box is gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
