"""Limits of a whole run in the real local sandbox: the run's tree in one cgroup (memory,
process count), scratch capped on every writable mount, the egress socket private."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sandbox.cgroups import CgroupTree
from sandbox.egress import Resolver
from sandbox.idempotency import create_store_engine, create_tables
from sandbox.local_runner import LocalRunner
from sandbox.sandbox_argv import SCRATCH_MB
from sandbox.types import RunOutput, RunStatus, SandboxJob, ToolLimits
from tests.sandbox.origin import MapResolver
from tests.sandbox.proc_scan import leftovers

pytestmark = pytest.mark.sandbox
# Six children of 100 MiB each: within memory_mb for every process, 600 MiB for the run.
CHILDREN = """
import os, sys, time
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (100 << 20)
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("all six children held 100 MiB", sys.argv[1])
"""
# One process, 360 MiB in memory files: outside its address space, so RLIMIT_AS never sees it.
MEMFDS = """
import os
fds = []
for n in range(6):
    fd = os.memfd_create(f"m{n}")
    for _ in range(60):
        os.write(fd, b"\\1" * (1 << 20))
    fds.append(fd)
print("six memory files of 60 MiB held")
"""
SCRATCH_PROBE = r"""
import errno, json, os, stat, sys
cap = int(sys.argv[1]) << 20
mounts = [line.split() for line in open("/proc/self/mounts")]
writable = sorted({m[1] for m in mounts if "rw" in m[3].split(",")})
out = {}
for point in [*writable, "/", "/dev"]:
    mode = os.stat(point).st_mode
    if not stat.S_ISDIR(mode):
        out[point] = ["char-device" if stat.S_ISCHR(mode) else oct(mode), 0, ""]
        continue
    written, error = 0, ""
    try:
        fd = os.open(os.path.join(point, "fill"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            while written < cap + (1 << 20):
                written += os.write(fd, b"\1" * (1 << 20))
        finally:
            os.close(fd)
    except OSError as exc:
        error = errno.errorcode[exc.errno]
    out[point] = ["dir", written, error]
print(json.dumps(out))
"""


def _run(
    job: SandboxJob, backend: str, cgroup_root: str = "auto", resolver: Resolver | None = None
) -> RunOutput:
    log = logging.getLogger("lantern.test.limits")
    runner = LocalRunner(log, resolver, backend=backend, cgroup_root=cgroup_root)
    try:
        return asyncio.run(runner.run(job))
    finally:
        runner.close()


def _run_cgroups(tree: CgroupTree) -> set[str]:
    parents = {tree.memory_parent, tree.pids_parent}
    return {name for parent in parents for name in os.listdir(parent) if "lantern-run-" in name}


def test_children_together_past_memory_mb_are_killed_as_a_whole(
    sandbox_backend: str, cgroup_tree: CgroupTree
) -> None:
    marker = f"children-{uuid.uuid4().hex}"
    before = _run_cgroups(cgroup_tree)
    argv = ("python3", "-c", CHILDREN, marker)
    limits = ToolLimits(wall_s=30, memory_mb=256, cpu_s=20, output_kb=8, max_procs=16)
    result = _run(SandboxJob("run1", "t", argv, limits), sandbox_backend)
    assert (result.status, result.reason) == (RunStatus.LIMIT_EXCEEDED, "memory-limit")
    assert (result.exit_code, result.stdout) == (137, "")  # the parent died with its children
    assert leftovers(marker) == []
    for _ in range(1000):  # the run's cgroup goes with it (later, when its tasks exit slowly)
        if _run_cgroups(cgroup_tree) == before:
            break
        time.sleep(0.01)
    assert _run_cgroups(cgroup_tree) == before
    roomy = ToolLimits(wall_s=30, memory_mb=1024, cpu_s=20, output_kb=8, max_procs=16)
    control = _run(SandboxJob("run2", "t", argv, roomy), sandbox_backend)
    assert (control.status, control.stdout) == (
        RunStatus.SUCCEEDED,
        f"all six children held 100 MiB {marker}\n",
    )


def test_memory_outside_the_address_space_counts_against_the_run(
    sandbox_backend: str, cgroup_tree: CgroupTree
) -> None:
    limits = ToolLimits(wall_s=30, memory_mb=256, cpu_s=20, output_kb=8, file_mb=64)
    result = _run(SandboxJob("run1", "t", ("python3", "-c", MEMFDS), limits), sandbox_backend)
    assert (result.status, result.reason, result.stdout) == (
        RunStatus.LIMIT_EXCEEDED,
        "memory-limit",
        "",
    )


def test_without_cgroups_each_process_is_bounded_not_the_run(sandbox_backend: str) -> None:
    """The fallback (`cgroup_root: off`, or no writable tree): RLIMIT_AS holds each process to
    memory_mb and RLIMIT_NPROC (counted in the box's own user namespace) the process count, so
    a run can hold up to memory_mb x max_procs, and memory outside the address space (memory
    files, SysV shared memory) is not bounded by memory_mb at all. This pins down what
    docs/sandbox.md says."""
    marker = f"fallback-{uuid.uuid4().hex}"
    limits = ToolLimits(wall_s=30, memory_mb=256, cpu_s=20, output_kb=8, max_procs=16)
    together = SandboxJob("run1", "t", ("python3", "-c", CHILDREN, marker), limits)
    result = _run(together, sandbox_backend, cgroup_root="off")
    assert (result.status, result.stdout) == (
        RunStatus.SUCCEEDED,
        f"all six children held 100 MiB {marker}\n",
    )
    alone = "try:\n    b = b'x' * (300 << 20)\nexcept MemoryError:\n    print('MemoryError')"
    one = _run(
        SandboxJob("run2", "t", ("python3", "-c", alone), limits),
        sandbox_backend,
        cgroup_root="off",
    )
    assert (one.status, one.stdout) == (RunStatus.SUCCEEDED, "MemoryError\n")
    files = SandboxJob("run3", "t", ("python3", "-c", MEMFDS), limits)
    held = _run(files, sandbox_backend, cgroup_root="off")
    assert (held.status, held.stdout) == (RunStatus.SUCCEEDED, "six memory files of 60 MiB held\n")


def test_a_refused_fork_in_the_run_cgroup_is_a_pids_breach(cgroup_tree: CgroupTree) -> None:
    """pids.max is the backstop behind RLIMIT_NPROC (which answers first inside the box):
    held by the kernel for everything in the run's cgroup, the box's own processes too."""
    group = cgroup_tree.create(ToolLimits(memory_mb=64, max_procs=2))
    try:
        forks = "import os\nfor _ in range(20):\n    os.fork() or os._exit(0)"
        argv = group.enter_argv(["python3", "-c", forks])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1
        assert done.stderr.rstrip().endswith(
            "BlockingIOError: [Errno 11] Resource temporarily unavailable"
        )
        assert group.breach() == "pids-limit"
    finally:
        group.remove()
    assert all(not os.path.exists(folder) for folder in group.dirs)


def test_writes_past_the_scratch_cap_fail_on_every_writable_mount(sandbox_backend: str) -> None:
    """Every mount the box sees as writable is tried; the egress socket's folder is mounted
    too (egress declared). Device nodes hold no data; everything else stops at the cap."""
    limits = ToolLimits(wall_s=60, memory_mb=1024, cpu_s=30, output_kb=16, file_mb=1024)
    argv = ("python3", "-c", SCRATCH_PROBE, str(SCRATCH_MB))
    job = SandboxJob("run1", "t", argv, limits, ("allowed.test:80",))
    result = _run(job, sandbox_backend, resolver=MapResolver())
    assert result.status is RunStatus.SUCCEEDED, result.stderr
    seen = json.loads(result.stdout)
    capped = ["dir", SCRATCH_MB << 20, "ENOSPC"]
    devices = ["/dev/full", "/dev/null", "/dev/random", "/dev/urandom", "/dev/zero"]
    expected = {
        "/": ["dir", 0, "EROFS"],
        "/dev": ["dir", 0, "EROFS"],
        "/proc": ["dir", 0, "ENOENT"],  # procfs creates no files
        "/tmp": capped,
        "/work": capped,
        **{device: ["char-device", 0, ""] for device in devices},
    }
    if sandbox_backend == "bwrap":
        expected |= {
            "/dev/pts": ["dir", 0, "EACCES"],
            "/dev/shm": capped,
            "/dev/tty": ["char-device", 0, ""],
        }
    assert seen == expected


def test_the_egress_socket_is_private_to_the_box(
    default_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy's socket sits in a 0700 folder as a 0600 socket, owned by the box's user
    (root runs the box as uid 65534), both gone after the run; inside, it is read-only."""
    temp = tempfile.TemporaryDirectory(prefix="lantern-test-")  # the box user must reach
    os.chmod(temp.name, 0o755)  # the launcher copy, which the runner also puts there
    monkeypatch.setattr(tempfile, "tempdir", temp.name)
    tmp_path = Path(temp.name)
    code = (
        "import os,socket\ns=socket.socket(socket.AF_UNIX)\n"
        "s.connect('/run/lantern/egress/egress.sock'); print('connected')\n"
        "import time; time.sleep(0.5)\n"
        "try: open('/run/lantern/egress/x','w')\nexcept OSError as e: print(e.errno)"
    )
    job = SandboxJob("run1", "t", ("python3", "-c", code), ToolLimits(), ("allowed.test:80",))
    runner = LocalRunner(logging.getLogger("lantern.test.limits"), MapResolver())
    owner = 65534 if os.geteuid() == 0 else os.geteuid()

    want = [(stat.S_IFDIR | 0o700, owner, owner), (stat.S_IFSOCK | 0o600, owner, owner)]
    folder_modes: set[int] = set()  # the folder's type and mode at every sample

    async def scenario() -> tuple[RunOutput, list[tuple[int, int, int]]]:
        """Samples until the socket is handed to the box (it is bound, then chmodded and
        chowned, with the loop turning in between) or the run ends."""
        task = asyncio.ensure_future(runner.run(job))
        modes: list[tuple[int, int, int]] = []
        while not task.done() and modes != want:
            for folder in tmp_path.glob("lantern-egress-*"):
                sock = folder / "egress.sock"
                try:
                    sample = [_mode(folder), _mode(sock)]
                except FileNotFoundError:  # not bound yet, or already removed
                    continue
                modes = sample
                folder_modes.add(sample[0][0])
            await asyncio.sleep(0.001)
        return await task, modes

    try:
        result, modes = asyncio.run(scenario())
    finally:
        runner.close()
        leftovers = list(tmp_path.glob("lantern-egress-*"))
        temp.cleanup()
    assert (result.status, result.stdout) == (RunStatus.SUCCEEDED, "connected\n30\n")  # EROFS
    assert modes == want
    assert folder_modes == {stat.S_IFDIR | 0o700}  # private at every moment, also before the chown
    assert leftovers == []


def _mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_mode, info.st_uid, info.st_gid


def test_the_sqlite_idempotency_file_is_owner_only(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    existing = tmp_path / "existing.db"
    existing.touch(mode=0o644)
    os.chmod(existing, 0o644)
    for path in (fresh, existing):
        engine = create_store_engine(f"sqlite:///{path}")
        create_tables(engine)
        engine.dispose()
    assert [stat.S_IMODE(p.stat().st_mode) for p in (fresh, existing)] == [0o600, 0o600]


def test_stale_empty_run_cgroups_are_swept_and_busy_or_young_ones_kept(
    cgroup_tree: CgroupTree,
) -> None:
    """What a gateway killed mid-run leaves: an empty cgroup. Swept once it is a minute old;
    one with a process inside, or one just made (another gateway's, not yet entered), stays."""
    old, busy, young = (cgroup_tree.create(ToolLimits()) for _ in range(3))
    sleeper = subprocess.Popen(busy.enter_argv(["sleep", "60"]))
    try:
        while not busy.pids():
            time.sleep(0.01)
        for group in (old, busy):
            for folder in group.dirs:
                os.utime(folder, (time.time() - 120, time.time() - 120))
        cgroup_tree.sweep_stale(60)  # its count includes what other killed gateways left here
        assert [[os.path.isdir(f) for f in g.dirs] for g in (old, busy, young)] == [
            [False] * len(old.dirs),
            [True] * len(busy.dirs),
            [True] * len(young.dirs),
        ]
    finally:
        busy.remove()
        young.remove()
        sleeper.wait()
