"""A tenant that floods tool runs, through the real door: two `lantern serve` processes sharing
Redis, real boxes held open on a real origin. The tenant's N+1th concurrent run gets 429 with
Retry-After on either process, nothing of it starts, and another tenant's run still proceeds."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bench._procs import free_port
from tests.e2e.harness import write_config, write_policy

pytestmark = [pytest.mark.sandbox, pytest.mark.redis, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys, urllib.request\n"
    "urllib.request.urlopen('http://localhost:' + sys.argv[1] + '/hold/' + sys.argv[2],"
    " timeout=120).read()\n"
    "print('released', sys.argv[2])\n"
)


class HoldingOrigin:
    """GET /hold/<key> is answered once `release` is set; `arrived` lists the keys seen."""

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.release = threading.Event()
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                origin.arrived.append(self.path.removeprefix("/hold/"))
                origin.release.wait(120)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin() -> Iterator[HoldingOrigin]:
    held = HoldingOrigin()
    yield held
    held.close()


@pytest.fixture
def gateways(tmp_path: Path, origin: HoldingOrigin, redis_url: str) -> Iterator[dict[str, str]]:
    """Two gateways, one Redis; tenants with fresh ids (the slots live under their ids)."""
    suffix = uuid.uuid4().hex[:8]
    tenants = {"flooder": f"flooder-{suffix}", "neighbour": f"neighbour-{suffix}"}
    (tmp_path / "policies").mkdir()
    hold = {
        "name": "hold",
        "command": ["python3", "-c", HOLD, str(origin.port), "{key}"],
        "egress": [f"localhost:{origin.port}"],
        "limits": {"wall_s": 120, "memory_mb": 256, "cpu_s": 20, "output_kb": 4},
    }
    quick = {"name": "quick", "command": ["python3", "-c", "print(6 * 7)"]}
    write_policy(
        tmp_path / "policies",
        tenants["flooder"],
        "lt-flooder-key",
        tools=[hold],
        tool_runs={"max_concurrent": 2},
    )
    write_policy(tmp_path / "policies", tenants["neighbour"], "lt-neighbour-key", tools=[quick])
    sandbox = {"egress_allow_cidrs": ["127.0.0.0/8", "::1/128"]}
    config = write_config(
        tmp_path / "lantern.yaml", tmp_path, [], redis_url=redis_url, sandbox=sandbox
    )
    running = [_start(config, tmp_path / f"gateway-{n}.log") for n in range(2)]
    try:
        yield {"one": running[0][1], "two": running[1][1]}
    finally:
        for proc, _ in running:
            proc.terminate()
            proc.wait(30)


def _start(config: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], cwd=REPO, env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"gateway at {url} not healthy:\n{log.read_text()[-3000:]}")


def _post(url: str, key: str, tool: str, idem: str, arguments: dict[str, str]) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "idempotency-key": idem}
    body = {"tool": tool, "arguments": arguments}
    return httpx.post(f"{url}/v1/tools/runs", json=body, headers=headers, timeout=180)


def test_a_tenants_run_past_its_cap_gets_429_while_another_tenant_proceeds(
    gateways: dict[str, str], origin: HoldingOrigin, tmp_path: Path
) -> None:
    flood = "lt-flooder-key"
    with ThreadPoolExecutor(2) as pool:
        held = [
            pool.submit(_post, gateways[gw], flood, "hold", f"step-{n}", {"key": f"k{n}"})
            for n, gw in ((1, "one"), (2, "two"))
        ]
        deadline = time.monotonic() + 120
        while len(origin.arrived) < 2:  # both runs are in their boxes, one per gateway
            assert time.monotonic() < deadline and not any(f.done() for f in held), [
                f.result().text for f in held if f.done()
            ]
            time.sleep(0.05)
        refused = [_post(gateways[gw], flood, "hold", "step-3", {"key": "k3"}) for gw in gateways]
        neighbour = _post(gateways["one"], "lt-neighbour-key", "quick", "n-1", {})
        origin.release.set()
        finished = [f.result() for f in held]
    message = "this tenant already has 2 tool runs going (tool_runs.max_concurrent); retry after 1s"
    expected = {
        "error": {
            "message": message,
            "type": "rate_limit_error",
            "param": "tool_runs.max_concurrent",
            "code": "tool_runs_concurrency_exceeded",
        }
    }
    assert [(r.status_code, r.headers.get("retry-after"), r.json()) for r in refused] == [
        (429, "1", expected),
        (429, "1", expected),
    ]
    assert sorted(origin.arrived) == ["k1", "k2"]  # the refused run never started
    assert (neighbour.status_code, neighbour.json()["status"], neighbour.json()["stdout"]) == (
        200,
        "succeeded",
        "42\n",
    )
    assert [(r.status_code, r.json()["status"], r.json()["stdout"]) for r in finished] == [
        (200, "succeeded", "released k1\n"),
        (200, "succeeded", "released k2\n"),
    ]
    again = _post(gateways["two"], flood, "hold", "step-3", {"key": "k3"})  # slots came back
    assert (again.status_code, again.json()["stdout"], "idempotent-replayed" in again.headers) == (
        200,
        "released k3\n",
        False,
    )
    # the databases of the ledger and of the runs' output are the owner's alone
    files = ("lantern.db", "lantern-tool-runs.db")
    assert [stat.S_IMODE((tmp_path / name).stat().st_mode) for name in files] == [0o600, 0o600]
