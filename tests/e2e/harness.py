"""A real gateway for end-to-end tests: uvicorn on a random port in a thread, real settings,
real policy files, real ledger; upstreams are the wire-level fakes."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
import yaml

from gateway.app import create_app
from gateway.core.admission import REDIS_KEY_PREFIX
from gateway.settings import Settings, load_settings
from gateway.wiring import GatewayProcess, build_components

ADMIN_TOKEN = "admin-test-token"


def write_policy(policy_dir: Path, tenant: str, key: str, **fields: Any) -> Path:
    doc: dict[str, Any] = {
        "tenant": tenant,
        "name": tenant.title(),
        "api_keys": [{"id": "k1", "sha256": hashlib.sha256(key.encode()).hexdigest()}],
        **fields,
    }
    path = policy_dir / f"{tenant}.yaml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.rename(path)
    return path


def write_config(path: Path, var_dir: Path, models: list[dict[str, Any]], **extra: Any) -> Path:
    doc = {
        "database_url": f"sqlite:///{var_dir}/lantern.db",
        "policy_dir": str(var_dir / "policies"),
        "var_dir": str(var_dir),
        "admin_token": ADMIN_TOKEN,
        "server_secret": "test-secret",
        "models": models,
        **extra,
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class RunningGateway:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] | None = None,
        components: GatewayProcess | None = None,
    ) -> None:
        """`components`: the process's parts, built by the test (a store it wraps, say)."""
        self.settings = settings
        if components is None and clock is not None:
            components = build_components(settings, clock=clock)
        self.app = create_app(settings, components)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=settings.http.keep_alive_s,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def components(self) -> Any:
        return self.app.state.components

    def start(self) -> RunningGateway:
        self._thread.start()
        # generous: a bundled engine child may still be compiling its CPU kernels
        deadline = time.monotonic() + 180
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()


def start_gateway(
    config_path: Path, *, clock: Callable[[], float] | None = None, **overrides: Any
) -> RunningGateway:
    """`clock`: the gateway's monotonic clock (session gaps, cooldowns), for simulated time."""
    return RunningGateway(load_settings(config_path, **overrides), clock).start()


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 15) -> None:
    """SIGTERM to each, then SIGKILL to any still running after `timeout_s`."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def drop_tenant_keys(redis_url: str, tenants: Iterable[str]) -> None:
    """Delete the quota keys of `tenants` (each test's tenants have fresh ids)."""
    client = redis.Redis.from_url(redis_url)
    for tenant in tenants:
        found = list(client.scan_iter(match=f"{REDIS_KEY_PREFIX}{{{tenant}}}*"))
        if found:
            client.delete(*found)
    client.close()


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Until `url`/healthz answers 200; the log's tail in the error if the gateway exits."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"gateway at {url} not healthy:\n{log.read_text()[-3000:]}")
