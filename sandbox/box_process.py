"""One started box, followed to its end: capped output, the wall-clock limit, and the run's
cgroup watched for a breach, on which the whole run is killed.

It turns what it saw into a `RunOutput`; it never starts a box without its isolation argv.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

from sandbox.cgroups import RunCgroup
from sandbox.errors import RunnerFailed
from sandbox.types import RunOutput, RunStatus, SandboxJob

WATCH_INTERVAL_S = 0.05
_SIGNAL_REASONS = {
    128 + signal.SIGXCPU: "cpu-limit",
    128 + signal.SIGKILL: "killed",
    128 + signal.SIGXFSZ: "file-size-limit",
    128 + signal.SIGSEGV: "segfault",
}


async def follow(
    argv: list[str],
    env: dict[str, str],
    job: SandboxJob,
    group: RunCgroup | None,
    clock: Callable[[], float],
) -> RunOutput:
    started = clock()
    cap = job.limits.output_kb * 1024
    proc = await _spawn(argv, env)
    assert proc.stdout is not None and proc.stderr is not None
    readers = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap))
    timed_out, breach = False, None
    try:
        timed_out, breach = await _wait(proc, job.limits.wall_s, group)
    finally:
        if proc.returncode is None:  # timed out, breached or cancelled; not reaped: still ours
            if group is not None:
                await asyncio.to_thread(group.kill)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    if group is not None and breach is None:  # an OOM kill just before the box ended
        breach = await asyncio.to_thread(group.breach)
    (out, out_cut), (err, err_cut) = await readers
    code = proc.returncode
    if code is not None and code < 0:  # unshare re-raises the child's signal on itself
        code = 128 - code
    if breach is not None:
        status, reason = RunStatus.LIMIT_EXCEEDED, breach
    elif timed_out:
        status, reason, code = RunStatus.TIMED_OUT, f"wall time limit {job.limits.wall_s}s", None
    else:
        status = RunStatus.SUCCEEDED if code == 0 else RunStatus.FAILED
        reason = _SIGNAL_REASONS.get(code or 0, "")
    return RunOutput(status, code, out, err, out_cut, err_cut, started, clock(), reason)


async def _wait(
    proc: asyncio.subprocess.Process, wall_s: float, group: RunCgroup | None
) -> tuple[bool, str | None]:
    """(timed out, breach): returns when the box ends, its wall time is up, or its cgroup
    reports a breach (then the whole cgroup is killed at once)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wall_s
    ended = asyncio.ensure_future(proc.wait())
    try:
        while not ended.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return True, None
            interval = remaining if group is None else min(remaining, WATCH_INTERVAL_S)
            await asyncio.wait({ended}, timeout=interval)
            if group is not None and not ended.done():
                breach = await asyncio.to_thread(group.breach)
                if breach is not None:
                    await asyncio.to_thread(group.kill)
                    return False, breach
        return False, None
    finally:
        ended.cancel()


async def _spawn(argv: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    """bwrap/unshare in a new session (its own process group)."""
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:  # nothing was started
        raise RunnerFailed(f"cannot start the sandbox: {exc.strerror}") from exc


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[str, bool]:
    """Up to `cap` bytes, decoded; the rest is drained and dropped so the child never blocks."""
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    return kept.decode("utf-8", errors="replace"), truncated
