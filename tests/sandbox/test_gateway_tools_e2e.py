"""Idempotency through real gateways: 4 gateway processes (the lead's app, settings, policy
store and API-key auth, with the tools router attached) share one SQLite tool-run store; real
HTTP; real sandboxed runs whose only side effect is one HTTP hit, through the egress proxy, on an
origin server that counts them. A gateway SIGKILLed mid-run never leads to a second hit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import write_config, write_policy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
KEY = "lt-acme-tools-key-0001"
LEASE_S = 5.0  # short, so a killed gateway's lease runs out quickly
TOOL = (
    "import sys, time, urllib.request\n"
    "url = 'http://localhost:' + sys.argv[3] + '/hit/' + sys.argv[1]\n"
    "urllib.request.urlopen(url, timeout=10).read()\n"
    "time.sleep(float(sys.argv[2]))\n"
    "print('ran', sys.argv[1])\n"
)


class HitCounter:
    """The origin: counts GET /hit/<key>, on 127.0.0.1 and (where there is one) ::1."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        lock, hits = threading.Lock(), self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                with lock:
                    hits[self.path.removeprefix("/hit/")] += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler)]
        self.port = self.servers[0].server_address[1]
        try:
            v6 = type("V6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
            self.servers.append(v6(("::1", self.port), Handler))
        except OSError:
            pass  # no IPv6 loopback here; localhost resolves to 127.0.0.1 only
        for server in self.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def origin() -> Iterator[HitCounter]:
    counter = HitCounter()
    yield counter
    counter.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _setup(var_dir: Path, origin: HitCounter) -> Path:
    (var_dir / "policies").mkdir()
    tool = {
        "name": "hit",
        "command": ["python3", "-c", TOOL, "{key}", "{sleep}", str(origin.port)],
        "egress": [f"localhost:{origin.port}"],
        "limits": {"wall_s": 60, "memory_mb": 256, "cpu_s": 10, "output_kb": 4},
    }
    # 20 keys at once per gateway: the tenant's run cap is not what this test is about
    write_policy(var_dir / "policies", "acme", KEY, tools=[tool], tool_runs={"max_concurrent": 80})
    return write_config(var_dir / "lantern.yaml", var_dir, [])


def _launch(config: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.sandbox.tools_gateway",
        "--config",
        str(config),
        "--port",
        str(port),
        "--lease",
        str(LEASE_S),
        # the operator's explicit exception: the test origin lives on loopback
        "--allow-cidr",
        "127.0.0.0/8",
        "--allow-cidr",
        "::1/128",
    ]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    handle = open(log, "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=handle, stderr=handle)
    return proc, f"http://127.0.0.1:{port}"


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"gateway did not start: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def gateways(
    default_backend: str, origin: HitCounter, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[subprocess.Popen[bytes], str]]]:
    """4 gateway processes on one SQLite file: the first creates the schemas, the other
    three start together."""
    var_dir = tmp_path_factory.mktemp("gateways")
    config = _setup(var_dir, origin)
    running = [_launch(config, var_dir / "gw0.log")]
    _wait_healthy(*running[0], var_dir / "gw0.log")
    running += [_launch(config, var_dir / f"gw{n}.log") for n in range(1, 4)]
    for n, (proc, url) in enumerate(running):
        _wait_healthy(proc, url, var_dir / f"gw{n}.log")
    yield running
    for proc, _ in running:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, _ in running:
        proc.wait(timeout=30)


def _body(key: str, sleep: str = "0.5") -> dict[str, object]:
    return {"tool": "hit", "arguments": {"key": key, "sleep": sleep}}


async def _ask(client: httpx.AsyncClient, url: str, key: str) -> dict[str, object]:
    reply = await client.post(
        f"{url}/v1/tools/runs", json=_body(key), headers={"Idempotency-Key": key}
    )
    return {"key": key, "status": reply.status_code, "body": reply.text}


async def _one_gateway(url: str, keys: list[str]) -> list[dict[str, object]]:
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(headers=headers, timeout=120) as client:
        answers = list(await asyncio.gather(*(_ask(client, url, k) for k in keys)))
        answers += await asyncio.gather(*(_ask(client, url, k) for k in reversed(keys)))
        for key in keys[:10]:
            answers.append(await _ask(client, url, key))
    return answers


def test_four_gateways_run_each_key_once(
    gateways: list[tuple[subprocess.Popen[bytes], str]], origin: HitCounter
) -> None:
    keys = [f"gw-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(20)]

    async def fire() -> list[list[dict[str, object]]]:
        return list(await asyncio.gather(*(_one_gateway(url, keys) for _, url in gateways)))

    answers = [a for batch in asyncio.run(fire()) for a in batch]
    assert len(answers) == 200
    assert {key: origin.hits[key] for key in keys} == {key: 1 for key in keys}, answers[:2]
    assert {a["status"] for a in answers} <= {200, 409}
    bodies: dict[object, set[object]] = {}
    for answer in answers:
        if answer["status"] == 200:
            bodies.setdefault(answer["key"], set()).add(answer["body"])
    assert sorted(bodies) == sorted(keys)  # type: ignore[type-var]
    for key, variants in bodies.items():
        (only,) = variants  # every 200 for a key, from any gateway, is the same bytes
        assert json.loads(str(only))["stdout"] == f"ran {key}\n"


def test_a_gateway_killed_mid_run_never_runs_the_tool_twice(
    gateways: list[tuple[subprocess.Popen[bytes], str]], origin: HitCounter
) -> None:
    (victim, victim_url), (_, survivor_url) = gateways[3], gateways[0]
    key = f"victim-{uuid.uuid4().hex[:8]}"
    headers = {"authorization": f"Bearer {KEY}", "Idempotency-Key": key}

    def doomed() -> None:
        with contextlib.suppress(httpx.HTTPError):  # its gateway is about to die
            httpx.post(
                f"{victim_url}/v1/tools/runs", json=_body(key, "30"), headers=headers, timeout=60
            )

    caller = threading.Thread(target=doomed)
    caller.start()
    deadline = time.monotonic() + 60
    while origin.hits[key] == 0:  # the tool made its one side effect and now sleeps
        assert time.monotonic() < deadline
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    caller.join()
    while True:  # 409 while the dead gateway's lease runs out, then the verdict
        retry = httpx.post(
            f"{survivor_url}/v1/tools/runs", json=_body(key, "30"), headers=headers, timeout=60
        )
        if retry.status_code != 409:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert retry.status_code == 500
    assert retry.json()["error"]["code"] == "tool_run_outcome_unknown"
    again = httpx.post(f"{survivor_url}/v1/tools/runs", json=_body(key, "30"), headers=headers)
    assert (again.content, again.headers["idempotent-replayed"]) == (retry.content, "true")
    assert origin.hits[key] == 1
