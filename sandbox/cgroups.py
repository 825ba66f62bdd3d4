"""One cgroup per tool run: memory, swap and process count of the run's whole tree.

cgroup v2 where this process may write a tree with the memory and pids controllers, else the
v1 memory and pids hierarchies; `None` from `CgroupTree.detect` means neither is writable and
the runner falls back to per-process rlimits. Plain file I/O on cgroupfs; it decides nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sandbox.types import ToolLimits

# The box's own processes (setpriv/bwrap, the namespace's init, the proxy forwarder) on top of
# the tool's max_procs, so that the tool's RLIMIT_NPROC answers first and pids.max is the
# backstop that holds whatever the rlimit misses.
BOX_PROCESSES = 4
# Entering: the wrapper moves itself into the run's cgroup(s), then execs the sandbox, so every
# process of the run is born inside it.
_PREFIX = "lantern-run-"
# Files a kernel may lack: swap files without swap accounting (then there is no swap to bound),
# memory.oom.group before 4.19 (then the watcher's kill takes the rest of the run).
_OPTIONAL = frozenset({"memory.memsw.limit_in_bytes", "memory.swap.max", "memory.oom.group"})
_ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class CgroupTree:
    """Where run cgroups are made: `version` 2 (memory and pids in one directory) or 1."""

    version: int
    memory_parent: str
    pids_parent: str

    @classmethod
    def detect(cls, root: str = "auto") -> CgroupTree | None:
        """`auto`: the first writable tree (v2, then v1) under this process's own cgroup;
        `off`: None; a path: that v2 directory (delegated to this user), or ValueError."""
        if root == "off":
            return None
        if root != "auto":
            tree = cls._v2(Path(root))
            if tree is None:
                raise ValueError(f"{root}: not a writable cgroup v2 directory with memory+pids")
            return tree
        mounts = _mounts()
        own = _own_cgroups()
        v2 = mounts.get("cgroup2")
        if v2 is not None and "" in own:
            tree = cls._v2(Path(v2 + own[""]))
            if tree is not None:
                return tree
        memory, pids = mounts.get("memory"), mounts.get("pids")
        if memory is None or pids is None or "memory" not in own or "pids" not in own:
            return None
        tree = cls(1, memory + own["memory"], pids + own["pids"])
        return tree if tree._works() else None

    @classmethod
    def _v2(cls, parent: Path) -> CgroupTree | None:
        try:
            available = (parent / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(available):
                return None
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:  # missing, not ours, or EBUSY (processes in a non-root parent)
            return None
        tree = cls(2, str(parent), str(parent))
        return tree if tree._works() else None

    def _works(self) -> bool:
        try:
            probe = self.create(ToolLimits(memory_mb=16, max_procs=1))
        except OSError:
            return False
        probe.remove()
        return True

    def sweep_stale(self, min_age_s: float = 60.0) -> int:
        """Remove empty run cgroups older than `min_age_s` (left by a gateway killed mid-run;
        its runs died with it). Younger ones may be another gateway's, not yet entered."""
        removed = 0
        now = time.time()
        for parent in dict.fromkeys((self.memory_parent, self.pids_parent)):
            for entry in os.scandir(parent):
                if not entry.name.startswith(_PREFIX) or not entry.is_dir(follow_symlinks=False):
                    continue
                with contextlib.suppress(OSError):  # busy (processes inside) or gone
                    if now - entry.stat().st_mtime >= min_age_s:
                        os.rmdir(entry.path)
                        removed += 1
        return removed

    def create(self, limits: ToolLimits) -> RunCgroup:
        """A fresh cgroup with the run's limits written; OSError when it cannot be made."""
        name = f"{_PREFIX}{uuid.uuid4().hex[:16]}"
        memory_bytes = str(limits.memory_mb << 20)
        pids = str(limits.max_procs + BOX_PROCESSES)
        if self.version == 2:
            group = RunCgroup(2, (os.path.join(self.memory_parent, name),), limits.memory_mb)
            os.mkdir(group.dirs[0])
            values = {"memory.max": memory_bytes, "memory.swap.max": "0", "pids.max": pids}
            values["memory.oom.group"] = "1"  # the kernel's OOM kill takes the whole run
        else:
            dirs = (os.path.join(self.memory_parent, name), os.path.join(self.pids_parent, name))
            group = RunCgroup(1, dirs, limits.memory_mb)
            for folder in dirs:
                os.mkdir(folder)
            values = {"memory.limit_in_bytes": memory_bytes, "pids.max": pids}
            values["memory.memsw.limit_in_bytes"] = memory_bytes  # no swap beyond memory
        try:
            group.write_limits(values)
        except OSError:
            group.remove()
            raise
        return group


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroup: a v2 directory, or the v1 (memory, pids) pair."""

    version: int
    dirs: tuple[str, ...]
    memory_mb: int

    def write_limits(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            path = self._file(name)
            if path is None:
                if name in _OPTIONAL:
                    continue
                raise OSError(errno.ENOENT, f"no {name} in {self.dirs}")
            Path(path).write_text(value)

    def enter_argv(self, argv: list[str]) -> list[str]:
        """`argv`, started inside this cgroup (a shell that joins it, then execs)."""
        procs = [os.path.join(folder, "cgroup.procs") for folder in self.dirs]
        return ["/bin/sh", "-c", _ENTER, "lantern-cgroup", *procs, "--", *argv]

    def breach(self) -> str | None:
        """'memory-limit' after an OOM kill inside the run, 'pids-limit' after a refused
        fork, else None."""
        if self.version == 2:
            memory = _counters(self._file("memory.events"))
            if memory.get("oom_kill", 0) or memory.get("oom_group_kill", 0):
                return "memory-limit"
        elif _counters(self._file("memory.oom_control")).get("oom_kill", 0):
            return "memory-limit"
        if _counters(self._file("pids.events")).get("max", 0):
            return "pids-limit"
        return None

    def kill(self) -> None:
        """SIGKILL every process of the run (cgroup.kill on v2 when the kernel has it)."""
        kill_file = self._file("cgroup.kill")
        if kill_file is not None:
            Path(kill_file).write_text("1")
        for _ in range(100):  # forks racing the kill stop at pids.max; a few rounds suffice
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def pids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            text = Path(self.dirs[0], "cgroup.procs").read_text()
            return [int(line) for line in text.split()]
        return []

    def remove(self, wait_s: float = 2.0) -> bool:
        """Kill what is left, then remove the directories, retried for up to `wait_s` while
        exiting tasks still hold them; False when one is still held then."""
        self.kill()
        deadline = time.monotonic() + wait_s
        for folder in self.dirs:
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.01)
        return True

    def _file(self, name: str) -> str | None:
        for folder in self.dirs:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                return path
        return None


def _counters(path: str | None) -> dict[str, int]:
    """`key value` lines (memory.events, pids.events, memory.oom_control)."""
    if path is None:
        return {}
    found: dict[str, int] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                found[key] = int(value)
    return found


def _mounts() -> dict[str, str]:
    """Mount points: 'cgroup2' for the v2 tree, controller names for v1 hierarchies."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, kind, options = fields[1], fields[2], fields[3].split(",")
        if kind == "cgroup2":
            found.setdefault("cgroup2", point)
        elif kind == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    found.setdefault(controller, point)
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per controller ('' for v2), '/' mapped to ''."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = "" if path == "/" else path
    return found
