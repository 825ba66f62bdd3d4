"""Gateways as users start them (`python -m gateway.cli.main serve`), a client that keeps the
request ids of the calls it saw succeed, and the ledger rows read back from the database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from bench._procs import free_port
from tests.e2e.harness import write_config, write_policy

REPO = Path(__file__).resolve().parents[2]
KEY = "lt-ledger-adversarial-key-0001"
TENANT = "ledger-acme"
TOOL = {
    "name": "run_python",
    "runner": "local",
    "command": ["python3", "-c", "{code}"],
    "egress": [],
    "limits": {"wall_s": 20, "memory_mb": 256, "cpu_s": 10, "output_kb": 4},
}


def wait_until(predicate: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    """Polls `predicate`; the limit only keeps a broken build from hanging (not a timing test)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for: {what}")
        time.sleep(0.05)


def model_entry(upstream: Any, wire: str, name: str, backend: str) -> dict[str, Any]:
    """A model served by the fake upstream on `wire` (openai or anthropic) via `backend`."""
    if wire == "openai":
        spec = {"kind": "openai_compatible", "base_url": upstream.openai_base_url}
        spec["model"] = "gpt-4o-mini"
    else:
        spec = {"kind": "anthropic", "base_url": upstream.base_url, "api_key_env": None}
        spec["model"] = "claude-sonnet-4-5"
    return {"name": name, "backends": [{**spec, "name": backend, "timeout_s": 10}]}


def gateway_config(
    var_dir: Path,
    upstream: Any,
    database_url: str,
    models: list[dict[str, Any]] | None = None,
    *,
    tenant: str = TENANT,
    limits: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """By default two models on the fake upstream, one per wire (OpenAI chat, Anthropic
    messages); `tenant` (key `KEY`) may run the `run_python` tool."""
    (var_dir / "policies").mkdir(parents=True, exist_ok=True)
    limits = limits or {"tokens_per_minute": 10_000_000}
    write_policy(var_dir / "policies", tenant, KEY, limits=limits, tools=[TOOL])
    if models is None:
        models = [
            model_entry(upstream, "openai", "gpt-4o-mini", "fake-openai"),
            model_entry(upstream, "anthropic", "claude-sonnet-4-5", "fake-anthropic"),
        ]
    return write_config(
        var_dir / "lantern.yaml", var_dir, models, database_url=database_url, **extra
    )


@dataclass
class GatewayProcess:
    config: Path
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayProcess:
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(self.config)]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--port", str(self.port)], cwd=REPO, env=env, stdout=out, stderr=out
            )
        wait_until(self._is_healthy, f"gateway healthy (log: {self.log})", limit_s=120)
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def _is_healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"gateway exited:\n{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@contextmanager
def running(gateway: GatewayProcess) -> Iterator[GatewayProcess]:
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


def chat_call(client: httpx.Client, url: str, n: int) -> str | None:
    """One call, alternating door and streaming; the request id when the whole reply came."""
    stream = n % 2 == 1
    if n % 4 < 2:
        path = "/v1/chat/completions"
        body: dict[str, Any] = {"model": "gpt-4o-mini", "max_tokens": 32}
    else:
        path = "/v1/messages"
        body = {"model": "claude-sonnet-4-5", "max_tokens": 32}
    body["messages"] = [{"role": "user", "content": f"call {n}: words:{1 + n % 7}"}]
    body["stream"] = stream
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    try:
        with client.stream("POST", url + path, json=body, headers=headers) as response:
            response.read()  # to the end of the body: only then has the client seen success
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return response.headers["x-lantern-request-id"]


class Traffic:
    """`num_clients` threads calling the gateway in a loop until `stop()`."""

    def __init__(self, url: str, num_clients: int = 4) -> None:
        self.url = url
        self.succeeded: list[str] = []
        self.num_failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counter = iter(range(10**9))
        self._threads = [threading.Thread(target=self._loop) for _ in range(num_clients)]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def num_succeeded(self) -> int:
        with self._lock:
            return len(self.succeeded)

    def _loop(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                with self._lock:
                    n = next(self._counter)
                request_id = chat_call(client, self.url, n)
                with self._lock:
                    if request_id is None:
                        self.num_failed += 1
                    else:
                        self.succeeded.append(request_id)


def ledger_request_ids(database_url: str) -> Counter[str]:
    """request id -> number of rows; empty while the table does not exist yet."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            if not sa.inspect(connection).has_table("usage"):
                return Counter()
            ids = connection.execute(sa.text("SELECT request_id FROM usage")).scalars().all()
        return Counter(ids)
    except sa.exc.OperationalError:
        return Counter()
    finally:
        engine.dispose()
