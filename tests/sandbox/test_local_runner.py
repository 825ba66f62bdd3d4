"""Hostile tools in the real local sandbox (bubblewrap, or unshare without it)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import uuid
from pathlib import Path

import pytest

from sandbox.addresses import parse_cidrs
from sandbox.local_runner import LocalRunner
from sandbox.types import RunOutput, RunStatus, SandboxJob, ToolLimits
from tests.sandbox.origin import MapResolver, origin_server
from tests.sandbox.proc_scan import leftovers

pytestmark = pytest.mark.sandbox
LIMITS = ToolLimits(wall_s=10, memory_mb=256, cpu_s=5, output_kb=64, max_procs=32, file_mb=8)


def _run(
    backend: str,
    argv: tuple[str, ...],
    limits: ToolLimits = LIMITS,
    egress: tuple[str, ...] = (),
) -> RunOutput:
    runner = LocalRunner(logging.getLogger("lantern.test.egress"), backend=backend)
    try:
        return asyncio.run(runner.run(SandboxJob("run1", "t", argv, limits, egress)))
    finally:
        runner.close()


def _python(backend: str, code: str, limits: ToolLimits = LIMITS) -> RunOutput:
    return _run(backend, ("python3", "-c", code), limits)


def test_host_files_are_not_there(sandbox_backend: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    paths = [
        str(secret),
        "/etc/shadow",
        "/etc/passwd",
        "/root/.bashrc",
        str(Path.cwd() / "pyproject.toml"),
        "/var/run/docker.sock",
        "/home",
    ]
    code = (
        "import json,sys\nout={}\n"
        f"for p in {paths!r}:\n"
        "    try: open(p).read(); out[p]='READ'\n"
        "    except Exception as e: out[p]=type(e).__name__\n"
        "print(json.dumps(out))"
    )
    result = _python(sandbox_backend, code)
    assert result.status is RunStatus.SUCCEEDED, result.stderr
    assert json.loads(result.stdout) == {p: "FileNotFoundError" for p in paths}


def test_environment_is_clean(sandbox_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-credential")
    monkeypatch.setenv("LANTERN_TEST_SECRET", "host-secret")
    code = "import os,json,socket;print(socket.gethostname());print(json.dumps(dict(os.environ)))"
    host, env = _python(sandbox_backend, code).stdout.splitlines()
    assert host == "sandbox"
    assert json.loads(env) == {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/work",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PWD": "/work",
    }


def test_root_is_read_only_and_scratch_is_writable(sandbox_backend: str) -> None:
    code = (
        "import os\nopen('/work/a','w').write('x'); print(open('/work/a').read())\n"
        "for p in ['/usr/evil', '/etc/evil', '/evil']:\n"
        "    try: open(p,'w'); print('WROTE', p)\n"
        "    except OSError as e: print(p, e.errno)\n"
    )
    result = _python(sandbox_backend, code)
    assert result.stdout == "x\n/usr/evil 30\n/etc/evil 30\n/evil 30\n"  # EROFS


def test_fork_bomb_is_contained(sandbox_backend: str) -> None:
    marker = f"bomb-{uuid.uuid4().hex}"
    limits = ToolLimits(wall_s=2, memory_mb=256, cpu_s=2, output_kb=4, max_procs=16)
    result = _run(sandbox_backend, ("sh", "-c", "b() { b | b & }; b; wait", marker), limits)
    assert result.status in (RunStatus.TIMED_OUT, RunStatus.SUCCEEDED, RunStatus.FAILED)
    assert leftovers(marker) == []
    counted = _python(
        sandbox_backend,
        (
            "import os,time\nn=0\n"
            "while True:\n"
            "    try: pid=os.fork()\n"
            "    except BlockingIOError: break\n"
            "    if pid==0: time.sleep(5); os._exit(0)\n"
            "    n+=1\n"
            "print(n)"
        ),
        limits,
    )
    assert 10 <= int(counted.stdout) < 16  # RLIMIT_NPROC, counted inside the box's own userns


def test_memory_hog_is_contained(sandbox_backend: str) -> None:
    limits = ToolLimits(wall_s=10, memory_mb=128, cpu_s=5, output_kb=8)
    code = "try:\n    b = bytearray(512 << 20)\nexcept MemoryError:\n    print('MemoryError')"
    assert _python(sandbox_backend, code, limits).stdout == "MemoryError\n"
    hog = _python(sandbox_backend, "b = [bytearray(1 << 20) for _ in range(1024)]", limits)
    assert (hog.status, hog.exit_code) == (RunStatus.FAILED, 1)
    assert hog.stderr.rstrip().endswith("MemoryError")


def test_sleep_past_the_wall_limit_is_killed_with_its_group(sandbox_backend: str) -> None:
    marker = f"sleeper-{uuid.uuid4().hex}"
    limits = ToolLimits(wall_s=1, memory_mb=128, cpu_s=5, output_kb=8)
    result = _run(
        sandbox_backend, ("sh", "-c", "sleep 300 & sleep 300; echo never", marker), limits
    )
    assert (result.status, result.exit_code, result.stdout) == (RunStatus.TIMED_OUT, None, "")
    assert result.reason == "wall time limit 1s"
    assert leftovers(marker) == []


def test_cpu_limit_stops_a_spinner(sandbox_backend: str) -> None:
    limits = ToolLimits(wall_s=10, memory_mb=128, cpu_s=1, output_kb=8)
    result = _python(sandbox_backend, "while True: pass", limits)
    assert (result.status, result.reason) == (RunStatus.FAILED, "cpu-limit")


def test_output_is_capped_and_flagged(sandbox_backend: str) -> None:
    limits = ToolLimits(wall_s=10, memory_mb=128, cpu_s=5, output_kb=1, file_mb=1)
    result = _python(sandbox_backend, "import sys; sys.stdout.write('y' * 200000)", limits)
    assert (len(result.stdout), result.stdout_truncated, result.stderr_truncated) == (
        1024,
        True,
        False,
    )
    big = _run(sandbox_backend, ("sh", "-c", "head -c 2000000 /dev/zero > /work/f"), limits)
    assert (big.status, big.exit_code, big.reason) == (RunStatus.FAILED, 153, "file-size-limit")
    python = _python(sandbox_backend, "open('/work/f','wb').write(b'0' * (2 << 20))", limits)
    assert python.stderr.rstrip().endswith("OSError: [Errno 27] File too large")


def test_direct_network_access_fails(sandbox_backend: str) -> None:
    code = (
        "import socket\n"
        "for host, port in [('1.1.1.1', 443), ('127.0.0.1', 5432), ('127.0.0.2', 80), ('10.0.0.1', 80)]:\n"
        "    try: socket.create_connection((host, port), timeout=2); print('CONNECTED')\n"
        "    except OSError as e: print(host, e.errno)\n"
        "try: socket.getaddrinfo('pypi.org', 443); print('RESOLVED')\n"
        "except OSError as e: print('dns', type(e).__name__)\n"
    )
    assert _python(sandbox_backend, code).stdout == (
        "1.1.1.1 101\n127.0.0.1 111\n127.0.0.2 111\n10.0.0.1 101\ndns gaierror\n"
    )


PROBE = """
import json, os, socket, sys, urllib.request
proxy = ("127.0.0.1", 3128)
def connect(target):
    s = socket.create_connection(proxy, timeout=5)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\n\\r\\n".encode())
    return s.recv(200).split(b"\\r\\n")[0].decode()
out = {"env": os.environ.get("HTTPS_PROXY")}
out["plain"] = urllib.request.urlopen(f"http://allowed.test:{sys.argv[1]}/hi", timeout=5).read().decode()
s = socket.create_connection(proxy, timeout=5)
s.sendall(f"CONNECT allowed.test:{sys.argv[1]} HTTP/1.1\\r\\n\\r\\n".encode())
s.recv(39)
s.sendall(b"GET /tunnel HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
out["tunnel"] = s.recv(4096).split(b"\\r\\n\\r\\n")[1].decode()
for t in sys.argv[2:]:
    out[t] = connect(t.replace("PORT", sys.argv[1]))
print(json.dumps(out))
"""


def test_through_the_proxy_only_the_allowed_host_is_reached(sandbox_backend: str) -> None:
    refused = [
        "127.0.0.2:PORT",
        "2130706433:PORT",
        "0x7f000002:PORT",
        "0177.0.0.2:PORT",
        "127.2:PORT",
        "0:PORT",
        "[::1]:PORT",
        "169.254.169.254:80",
        "loopback.test:PORT",
        "private.test:PORT",
        "metadata.test:PORT",
        "ecs-creds.test:PORT",
        "allowed.test:22",
    ]

    async def scenario() -> tuple[RunOutput, int]:
        async with origin_server() as port:
            runner = LocalRunner(
                logging.getLogger("lantern.test.egress"),
                MapResolver(),
                parse_cidrs(["127.0.0.2/32"]),
                backend=sandbox_backend,
            )
            egress = tuple(
                f"{n}:{port}"
                for n in (
                    "allowed.test",
                    "loopback.test",
                    "private.test",
                    "metadata.test",
                    "ecs-creds.test",
                )
            )
            job = SandboxJob(
                "run1", "t", ("python3", "-c", PROBE, str(port), *refused), LIMITS, egress
            )
            try:
                return await runner.run(job), port
            finally:
                runner.close()

    result, port = asyncio.run(scenario())
    assert result.status is RunStatus.SUCCEEDED, result.stderr
    out = json.loads(result.stdout)
    assert out.pop("env") == "http://127.0.0.1:3128"
    assert out.pop("plain") == f"origin saw GET /hi HTTP/1.1 host=allowed.test:{port}"
    assert out.pop("tunnel") == "origin saw GET /tunnel HTTP/1.1 host=allowed.test"
    assert out == {t: "HTTP/1.1 403 Forbidden" for t in refused}


def test_no_namespaces_means_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.errors import SandboxUnavailable

    monkeypatch.setenv("PATH", str(tmp_path))  # neither bwrap nor unshare can be found
    runner = LocalRunner(logging.getLogger("t"))
    with pytest.raises(SandboxUnavailable):
        asyncio.run(runner.run(SandboxJob("r", "t", ("true",), LIMITS)))
    runner.close()
    assert os.environ["PATH"] == str(tmp_path)


SYSCALLS = {  # name: (x86_64, aarch64, arguments); unfiltered each returns 0, EFAULT or EINVAL
    "ptrace_traceme": (101, 117, (0, 0, 0, 0)),
    "io_uring_setup": (425, 425, (1, 0)),
    "keyctl_session_keyring": (250, 219, (0, -3, 1)),
    "perf_event_open": (298, 241, (0, 0, -1, -1, 0)),
    "clone3": (435, 435, (0, 0)),
}


def test_the_syscall_filter_refuses_kernel_attack_surface(sandbox_backend: str) -> None:
    column = {"x86_64": 0, "aarch64": 1}[platform.machine()]
    calls = {name: (numbers[column], numbers[2]) for name, numbers in SYSCALLS.items()}
    code = (
        "import ctypes, json\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
        f"for name, (nr, args) in {calls!r}.items():\n"
        "    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])\n"
        "    out[name] = ctypes.get_errno() if r == -1 else 0\n"
        "print(json.dumps(out))"
    )
    result = _python(sandbox_backend, code)
    assert json.loads(result.stdout) == {
        "ptrace_traceme": 1,
        "io_uring_setup": 1,
        "keyctl_session_keyring": 1,
        "perf_event_open": 1,
        "clone3": 38,  # EPERM; ENOSYS makes libc fall back to clone()
    }
    threads = _python(
        sandbox_backend,
        "import threading as t; x = t.Thread(target=print, args=('ok',)); x.start(); x.join()",
    )
    assert threads.stdout == "ok\n"


def test_runs_under_uvloop_as_the_gateway_does(sandbox_backend: str) -> None:
    import uvloop  # uvicorn[standard] serves the gateway on uvloop

    runner = LocalRunner(logging.getLogger("t"), backend=sandbox_backend)
    job = SandboxJob("r", "t", ("echo", "ok"), LIMITS)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop_runner:
            result = loop_runner.run(runner.run(job))
    finally:
        runner.close()
    assert (result.status, result.stdout) == (RunStatus.SUCCEEDED, "ok\n")
