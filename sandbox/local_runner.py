"""The local runner: one tool run in bubblewrap (or `unshare` when bwrap is missing).

New user/pid/mount/net/ipc/uts namespaces, a read-only system tree and nothing of the host's
home, work or temp directories, size-capped tmpfs scratch, a clean environment, rlimits, one
cgroup per run for the tree's memory and process count (when a cgroup tree is writable), a
wall-clock kill of the whole run. It must never run a tool without isolation: it raises instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandbox.addresses import IPNetwork
from sandbox.box_process import follow
from sandbox.cgroups import CgroupTree, RunCgroup
from sandbox.egress import EgressPolicy, EgressProxy, Resolver, SystemResolver, parse_rules
from sandbox.errors import RunnerFailed, SandboxUnavailable
from sandbox.limits import rlimit_spec
from sandbox.sandbox_argv import SCRATCH_MB, SandboxLayout, bwrap_argv, unshare_argv
from sandbox.types import RunOutput, SandboxJob

PROXY_PORT = 3128
# a run's cgroup still held by its killed tasks after the run: how long it is retried, off the
# run's reply, before the next runner's sweep of empty `lantern-run-*` cgroups is left to it
LATE_REMOVE_S = 60.0


class LocalRunner:
    def __init__(
        self,
        logger: logging.Logger,
        resolver: Resolver | None = None,
        allow_cidrs: tuple[IPNetwork, ...] = (),
        backend: str = "auto",
        clock: Callable[[], float] = time.time,
        sandbox_uid: int = 65534,
        cgroup_root: str = "auto",
    ) -> None:
        self._log = logger
        self._resolver = resolver or SystemResolver()
        self._allow_cidrs = allow_cidrs
        self._wanted = backend
        self._clock = clock
        self._uid = sandbox_uid
        self._backend: str | None = None
        self._launcher_dir: str | None = None
        self._layout_cache: SandboxLayout | None = None
        self._closed = False
        self._cgroup_root = cgroup_root
        self._cgroup_tree: CgroupTree | None = None
        self._cgroup_probed = False
        self._late_removals: set[asyncio.Task[None]] = set()

    @property
    def _layout(self) -> SandboxLayout:
        """Built on first use: the launcher is copied to a world-readable directory, since the
        box's user (uid 65534) may not be able to reach the installed package."""
        if self._closed:
            raise SandboxUnavailable("this runner was closed")
        if self._layout_cache is None:
            self._launcher_dir = tempfile.mkdtemp(prefix="lantern-launcher-")
            os.chmod(self._launcher_dir, 0o755)
            launcher = Path(self._launcher_dir) / "launcher.py"
            shutil.copyfile(Path(__file__).with_name("launcher.py"), launcher)
            os.chmod(launcher, 0o644)
            self._layout_cache = SandboxLayout.detect(launcher)
        return self._layout_cache

    def close(self) -> None:
        """Remove the launcher copy (call at shutdown)."""
        if self._launcher_dir is not None:
            shutil.rmtree(self._launcher_dir, ignore_errors=True)
        self._launcher_dir, self._layout_cache, self._closed = None, None, True

    def backend(self) -> str:
        """'bwrap' or 'unshare', probed once per runner; SandboxUnavailable when neither works."""
        if self._backend is None:
            candidates = ["bwrap", "unshare"] if self._wanted == "auto" else [self._wanted]
            for name in candidates:
                if self._probe(name):
                    self._backend = name
                    break
            else:
                raise SandboxUnavailable(
                    "cannot create namespaces here (install bubblewrap, allow user namespaces; "
                    "on Ubuntu 24.04 see kernel.apparmor_restrict_unprivileged_userns)"
                )
        return self._backend

    def cgroups(self) -> CgroupTree | None:
        """The tree runs' cgroups are made in, probed once; None: per-process rlimits only."""
        if not self._cgroup_probed:
            try:
                self._cgroup_tree = CgroupTree.detect(self._cgroup_root)
            except ValueError as exc:  # a configured tree that is not usable: never run less
                raise SandboxUnavailable(f"sandbox cgroup_root: {exc}") from exc
            self._cgroup_probed = True
            if self._cgroup_tree is None:
                self._log.warning("no writable cgroup tree: limits are per process (rlimits)")
            elif removed := self._cgroup_tree.sweep_stale():
                self._log.info("removed %d run cgroups left by a stopped gateway", removed)
        return self._cgroup_tree

    def _argv(
        self, backend: str, inner: list[str], proxy_dir: str | None, scratch_mb: int
    ) -> list[str]:
        build = bwrap_argv if backend == "bwrap" else unshare_argv
        return [*self._drop_prefix(), *build(self._layout, inner, proxy_dir, scratch_mb)]

    def _probe(self, backend: str) -> bool:
        if shutil.which(backend) is None:
            return False
        argv = self._argv(backend, ["/bin/true"], None, 1)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0:
            self._log.warning("sandbox probe %s failed: %s", backend, done.stderr[-300:])
        return done.returncode == 0

    def _drop_prefix(self) -> list[str]:
        """As root, run the box as an unprivileged user so rlimits (NPROC) bind and host
        files owned by root stay unreadable even if a path were exposed. `setpriv` (util-linux)
        execs the sandbox in place; the event loop (uvloop too) needs no user/group support."""
        if os.geteuid() != 0:
            return []
        uid = str(self._uid)
        return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]

    async def run(self, job: SandboxJob) -> RunOutput:
        backend = await asyncio.to_thread(self.backend)
        inner = [self._layout.python, "-I", "-S", self._layout.launcher_target]
        for name, value in rlimit_spec(job.limits).items():
            inner += ["--rlimit", f"{name}={value}"]
        async with self._egress(job) as proxy_dir, self._cgroup(job) as group:
            if proxy_dir is not None:
                inner += ["--proxy", f"{self._layout.proxy_socket_target}:{PROXY_PORT}"]
            argv = self._argv(backend, [*inner, "--", *job.argv], proxy_dir, SCRATCH_MB)
            if group is not None:
                argv = group.enter_argv(argv)
            env = self._environment(job, proxy_dir is not None)
            return await follow(argv, env, job, group, self._clock)

    @contextlib.asynccontextmanager
    async def _cgroup(self, job: SandboxJob):  # type: ignore[no-untyped-def]
        """The run's own cgroup, removed (whatever is left in it killed) when the run ends."""
        tree = await asyncio.to_thread(self.cgroups)
        if tree is None:
            yield None
            return
        try:
            group: RunCgroup = await asyncio.to_thread(tree.create, job.limits)
        except OSError as exc:  # nothing was started
            raise RunnerFailed(f"cannot create the run's cgroup: {exc}") from exc
        try:
            yield group
        finally:
            if not await asyncio.to_thread(group.remove):
                # its killed tasks still exiting (a loaded host): removed off the run's reply
                late = asyncio.create_task(self._remove_late(group))
                self._late_removals.add(late)
                late.add_done_callback(self._late_removals.discard)

    async def _remove_late(self, group: RunCgroup) -> None:
        try:
            removed = await asyncio.to_thread(group.remove, LATE_REMOVE_S)
        except OSError as exc:
            removed = False
            self._log.warning("run cgroup %s not removed: %s", group.dirs[0], exc)
        if not removed:
            self._log.warning("run cgroup %s still held; left to the sweep", group.dirs[0])

    def _environment(self, job: SandboxJob, has_proxy: bool) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/work",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            **dict(job.env),
        }
        if has_proxy:
            url = f"http://127.0.0.1:{PROXY_PORT}"
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env[name] = url
        return env

    @contextlib.asynccontextmanager
    async def _egress(self, job: SandboxJob):  # type: ignore[no-untyped-def]
        if not job.egress:
            yield None
            return
        policy = EgressPolicy(job.tool, parse_rules(job.egress), self._allow_cidrs)
        proxy = EgressProxy(policy, self._resolver, self._log)
        folder, server = await self._listen(proxy)
        try:
            yield folder
        finally:
            server.close()
            shutil.rmtree(folder, ignore_errors=True)

    async def _listen(self, proxy: EgressProxy) -> tuple[str, asyncio.base_events.Server]:
        """The proxy's socket in a fresh private folder; RunnerFailed (nothing was started,
        nothing is left behind) when it cannot listen there."""
        folder, server = "", None
        try:
            folder = tempfile.mkdtemp(prefix="lantern-egress-")  # 0700, private to its owner
            path = os.path.join(folder, "egress.sock")
            server = await proxy.serve_unix(path)
            os.chmod(path, 0o600)
            if os.geteuid() == 0:  # the box (and bwrap, which binds it) runs as the sandbox uid
                for owned in (folder, path):
                    os.chown(owned, self._uid, self._uid)
        except OSError as exc:
            if server is not None:
                server.close()
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
            raise RunnerFailed(f"cannot start the egress proxy: {exc}") from exc
        return folder, server
