"""Processes for the MCP door's tests: upstream MCP servers made with the SDK
(`orders_server.py`) and a `lantern serve` process in front of them, with real policy files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench._procs import free_port
from tests.e2e.harness import stop_processes, wait_healthy, write_config

REPO = Path(__file__).resolve().parents[2]
ACME_KEY = "lt-acme-mcp-key-000000000000000000000001"
GLOBEX_KEY = "lt-globex-mcp-key-00000000000000000000002"
# a handshake-era client's first message (the 2025-11-25 revision)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
RUN_PYTHON = {
    "name": "run_python",
    "runner": "local",
    "command": ["python3", "-c", "{code}"],
    "description": "Run Python code in a sandbox; its stdout is the result.",
    "arguments": {"code": {"description": "the program"}},
    "egress": [],
    "limits": {"wall_s": 20, "memory_mb": 256, "cpu_s": 10, "output_kb": 16},
}


@dataclass
class Upstream:
    proc: subprocess.Popen[bytes]
    port: int
    headers_log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def requests_seen(self) -> list[dict[str, str]]:
        """The headers of every HTTP request the server received."""
        if not self.headers_log.exists():
            return []
        return [orjson.loads(line) for line in self.headers_log.read_bytes().splitlines()]


@contextmanager
def upstream_server(var_dir: Path, name: str, mode: str = "ok") -> Iterator[Upstream]:
    port, log = free_port(), var_dir / f"{name}-headers.jsonl"
    argv = [sys.executable, "-m", "tests.mcp.orders_server", str(port), str(log), mode]
    with open(var_dir / f"{name}.log", "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=dict(os.environ), stdout=out, stderr=out)
    try:
        _wait_listening(proc, port)
        yield Upstream(proc, port, log)
    finally:
        stop_processes([proc], timeout_s=5)


def _wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"upstream MCP server exited with {proc.returncode}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("upstream MCP server did not start")


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    var_dir: Path
    upstreams: dict[str, Upstream] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@contextmanager
def lantern_serve(var_dir: Path, **config: Any) -> Iterator[Gateway]:
    """`lantern serve` as users start it, over the policies already in `var_dir/policies`."""
    path = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        config.pop("models", []),
        fleet={"health_interval_s": 3600, "signal_interval_s": 0},
        **config,
    )
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(path)]
    log = var_dir / "gateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], cwd=REPO, env=dict(os.environ), stdout=out, stderr=out
        )
    gateway = Gateway(proc, port, var_dir)
    try:
        wait_healthy(proc, gateway.url, log)
        yield gateway
    finally:
        stop_processes([proc], timeout_s=20)
