"""Process plumbing shared by the benchmarks: free ports, starting servers, CPU time of a pid."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_ns(pid: int) -> int:
    """Nanoseconds on the CPU of a process's threads and its live descendants' (each thread's
    `schedstat`, the scheduler's own clock; `cpu_seconds` counts 10 ms ticks, too coarse for a
    second of calls). A thread that exits between two readings takes its time with it."""
    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                total += int((task / "schedstat").read_text().split()[0])
    return total


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            found += [child, *_descendants(child)]
    return found


def split_cores() -> tuple[frozenset[int], frozenset[int]] | None:
    """(the core for the proxy under test, the cores for everything else: the load generator and
    the fake upstream), or None with fewer than two cores. A proxy that shares its core with the
    upstream it just wrote to is preempted mid-call by it: its latency then carries the
    upstream's turn and its caches are refilled after every call."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    return frozenset(cores[-1:]), frozenset(cores[:-1])


def start(
    argv: list[str],
    health_url: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    log: Path | None = None,
    cwd: Path = ROOT,
    cores: frozenset[int] | None = None,
) -> subprocess.Popen[bytes]:
    """`argv` started and answering `health_url`; on `cores` when given (every thread and child
    it starts inherits them)."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=None if cores is None else lambda: os.sched_setaffinity(0, cores),
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[:4]} exited with {proc.returncode} (log: {log})")
        try:
            if httpx.get(health_url, timeout=2).status_code < 500:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"{argv[:4]} not healthy at {health_url}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
