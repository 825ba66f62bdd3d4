"""The local runner: one tool process in bubblewrap (or `unshare` when bwrap is missing).

New user/pid/mount/net/ipc/uts namespaces, a read-only system tree and nothing of the host's
home, work or temp directories, a tmpfs scratch dir, a clean environment, rlimits, a wall-clock
kill of the whole group. It must never run a tool without isolation: it raises instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandbox.addresses import IPNetwork
from sandbox.egress import EgressPolicy, EgressProxy, Resolver, SystemResolver, parse_rules
from sandbox.errors import RunnerFailed, SandboxUnavailable
from sandbox.limits import rlimit_spec
from sandbox.sandbox_argv import SandboxLayout, bwrap_argv, unshare_argv
from sandbox.types import RunOutput, RunStatus, SandboxJob

PROXY_PORT = 3128
_SIGNAL_REASONS = {
    128 + signal.SIGXCPU: "cpu-limit",
    128 + signal.SIGKILL: "killed",
    128 + signal.SIGXFSZ: "file-size-limit",
    128 + signal.SIGSEGV: "segfault",
}


class LocalRunner:
    def __init__(
        self,
        logger: logging.Logger,
        resolver: Resolver | None = None,
        allow_cidrs: tuple[IPNetwork, ...] = (),
        backend: str = "auto",
        clock: Callable[[], float] = time.time,
        sandbox_uid: int = 65534,
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
        async with self._egress(job) as proxy_dir:
            if proxy_dir is not None:
                inner += ["--proxy", f"{self._layout.proxy_socket_target}:{PROXY_PORT}"]
            argv = self._argv(backend, [*inner, "--", *job.argv], proxy_dir, 64)
            env = self._environment(job, proxy_dir is not None)
            return await self._execute(argv, env, job)

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
        folder = tempfile.mkdtemp(prefix="lantern-egress-")
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "egress.sock")
        server = await proxy.serve_unix(path)
        os.chmod(path, 0o666)
        try:
            yield folder
        finally:
            server.close()
            shutil.rmtree(folder, ignore_errors=True)

    async def _execute(self, argv: list[str], env: dict[str, str], job: SandboxJob) -> RunOutput:
        started = self._clock()
        cap = job.limits.output_kb * 1024
        proc = await self._spawn(argv, env)
        assert proc.stdout is not None and proc.stderr is not None
        readers = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), job.limits.wall_s)
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:  # timed out or cancelled; not reaped, so still ours
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        (out, out_cut), (err, err_cut) = await readers
        code = proc.returncode
        if code is not None and code < 0:  # unshare re-raises the child's signal on itself
            code = 128 - code
        if timed_out:
            status, reason, code = (
                RunStatus.TIMED_OUT,
                f"wall time limit {job.limits.wall_s}s",
                None,
            )
        else:
            status = RunStatus.SUCCEEDED if code == 0 else RunStatus.FAILED
            reason = _SIGNAL_REASONS.get(code or 0, "")
        return RunOutput(status, code, out, err, out_cut, err_cut, started, self._clock(), reason)

    async def _spawn(self, argv: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
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
