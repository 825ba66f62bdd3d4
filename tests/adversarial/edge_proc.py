"""A gateway process started as users start it (`python -m gateway.cli.main serve --config`), in
front of a wire-level fake upstream, with two tenants; plus raw-socket helpers for requests
that no well-behaved client library would send."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench._procs import free_port
from cachekeys.blockhash import tenant_salt
from cachekeys.isolation import scope_line
from tests.e2e.conftest import models_for
from tests.e2e.harness import write_config, write_policy
from tests.fakes.upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]
ACME_KEY = "lt-acme-edge-key-0001"
OTHER_KEY = "lt-other-edge-key-0002"
METRICS_TOKEN = "metrics-edge-token"
MAX_PROMPT_TOKENS = 2000
SERVER_SECRET = b"test-secret"  # tests/e2e/harness.write_config's
ECHO_TOOL = {"name": "echo", "command": ["/bin/echo", "ran"], "limits": {"wall_s": 20}}


@dataclass
class EdgeGateway:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    upstream: FakeUpstream

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rss_kib(self) -> int:
        """The gateway's resident memory (VmRSS of /proc/<pid>/status), KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def cpu_s_by_thread(self) -> dict[int, float]:
        """The CPU time (user + system) each of the gateway's threads has used, seconds, by
        thread id; the event loop's thread id is the process id."""
        tick = os.sysconf("SC_CLK_TCK")
        used = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:  # a worker thread that ended meanwhile
                continue
            used[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        return used

    def scope_line(self, tenant: str) -> str:
        """The provider-cache scope line the gateway adds to `tenant`'s prompts."""
        return scope_line(tenant_salt(SERVER_SECRET, tenant))

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


@contextmanager
def edge_gateway(
    var_dir: Path,
    *,
    metrics_token: str | None = None,
    other_limits: dict[str, Any] | None = None,
    **http: Any,
) -> Iterator[EdgeGateway]:
    """`http`: overrides of the `http` settings section (limits and deadlines);
    `other_limits`: the `limits` of the second tenant's policy (none by default)."""
    (var_dir / "policies").mkdir(parents=True, exist_ok=True)
    with FakeUpstream() as upstream:
        write_policy(
            var_dir / "policies",
            "acme",
            ACME_KEY,
            models=["gpt-4o-mini", "claude-sonnet-4-5"],
            limits={"max_prompt_tokens": MAX_PROMPT_TOKENS},
            tools=[ECHO_TOOL],
        )
        write_policy(
            var_dir / "policies",
            "other",
            OTHER_KEY,
            models=["gpt-4o-mini"],
            **({"limits": other_limits} if other_limits else {}),
        )
        config = write_config(
            var_dir / "lantern.yaml",
            var_dir,
            models_for(upstream)[:2],
            http=http,
            **({"metrics_token": metrics_token} if metrics_token else {}),
            # no periodic probes or scrapes: after start-up the upstream sees client calls only
            fleet={"health_interval_s": 3600, "signal_interval_s": 0},
        )
        port = free_port()
        log = var_dir / "gateway.log"
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*argv, "--port", str(port)], cwd=REPO, env=dict(os.environ), stdout=out, stderr=out
            )
        gateway = EdgeGateway(proc, port, log, upstream)
        try:
            _wait_healthy(gateway)
            yield gateway
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def _wait_healthy(gw: EdgeGateway) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if gw.proc.poll() is not None:
            raise RuntimeError(
                f"gateway exited {gw.proc.returncode}:\n{gw.log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(gw.url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"gateway not healthy:\n{gw.log.read_text()[-3000:]}")


def request_head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass(frozen=True)
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def read_reply(sock: socket.socket) -> RawReply:
    """One HTTP/1.1 reply with a Content-Length body (what the gateway's JSON errors carry)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before a reply: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return RawReply(int(status_line.split()[1]), headers, rest[:length])


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout bounds
    the wait: a server that never closes fails the test with `TimeoutError`)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
