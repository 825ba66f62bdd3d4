"""`lantern serve` as an orchestrator runs it: SIGTERM drains (/ready turns 503 while /health
stays up, a stream in flight finishes, its ledger row is written, the process exits), and
`--workers 2` puts two processes on one port that both answer and share session affinity."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa

from bench._procs import free_port
from tests.e2e.harness import stop_processes, wait_healthy, write_config, write_policy
from tests.fakes.upstream import FakeUpstream
from tests.quotas.conftest import delete_prefix

REPO = Path(__file__).resolve().parents[2]
KEY = "lt-scale-secret-key-0001"
HEADERS = {"authorization": f"Bearer {KEY}"}


def model(*replicas: FakeUpstream) -> list[dict[str, object]]:
    first, *rest = replicas
    backend: dict[str, object] = {
        "kind": "openai_compatible",
        "name": "fake",
        "base_url": first.openai_base_url,
        "model": "gpt-4o-mini",
        "timeout_s": 10,
        "metrics_path": None,
    }
    if rest:
        backend["replicas"] = [r.openai_base_url for r in rest]
    return [{"name": "gpt-4o-mini", "backends": [backend]}]


def serve(config: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
    out = open(log, "wb")  # noqa: SIM115 - lives with the process
    return subprocess.Popen(
        [*argv, "--port", str(port), *extra], cwd=REPO, env=env, stdout=out, stderr=out
    )


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def test_sigterm_drains_a_stream_and_flushes_its_ledger_row(
    tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]
) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    http = {"drain_grace_s": 1.5, "drain_timeout_s": 20}
    config = write_config(tmp_path / "l.yaml", tmp_path, model(upstreams[0]), http=http)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(config, port, tmp_path / "gw.log")
    try:
        wait_healthy(proc, url, tmp_path / "gw.log")
        assert httpx.get(url + "/ready").json() == {"status": "ready"}
        body = {
            "model": "gpt-4o-mini",
            "stream": True,
            "messages": [{"role": "user", "content": "words:60 slow:stream tell a story"}],
        }
        chunks: list[str] = []

        def stream() -> None:
            with httpx.stream(
                "POST", url + "/v1/chat/completions", json=body, headers=HEADERS
            ) as r:
                chunks.extend(line for line in r.iter_lines() if line)

        client = threading.Thread(target=stream)
        client.start()
        while not upstreams[0].requests:
            time.sleep(0.02)
        time.sleep(0.2)  # the stream is under way (60 chunks, 50 ms apart)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        ready, health = httpx.get(url + "/ready"), httpx.get(url + "/health")
        client.join(timeout=30)
        code = proc.wait(timeout=30)
    finally:
        stop_processes([proc])
    assert (ready.status_code, ready.json(), health.status_code) == (
        503,
        {"status": "draining"},
        200,
    )
    assert chunks[-1] == "data: [DONE]"
    assert sum(1 for c in chunks if '"content"' in c) >= 60
    assert code in (0, -signal.SIGTERM)
    engine = sa.create_engine(f"sqlite:///{tmp_path}/lantern.db")
    with engine.connect() as db:
        rows = db.execute(sa.text("select status, output_tokens from usage")).all()
    assert [tuple(r) for r in rows] == [("ok", 60)]


@pytest.mark.redis
def test_two_workers_share_the_port_and_the_session_affinity(
    tmp_path: Path,
    upstreams: tuple[FakeUpstream, FakeUpstream],
    redis_url: str,
    redis_prefix: str,
) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    fleet = {"signal_interval_s": 0, "shared_key_prefix": redis_prefix}
    config = write_config(
        tmp_path / "l.yaml", tmp_path, model(*upstreams), redis_url=redis_url, fleet=fleet
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(config, port, tmp_path / "gw.log", "--workers", "2")
    workers: list[str] = []
    recalled: dict[str, float] = {}
    try:
        wait_healthy(proc, url, tmp_path / "gw.log")
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "words:3 hi"}]}
        for _ in range(40):  # a fresh connection each: the kernel spreads them over the workers
            r = httpx.post(
                url + "/v1/chat/completions", json=body, headers=HEADERS | {"x-session-id": "s-1"}
            )
            assert r.status_code == 200, r.text
            workers.append(r.headers["x-lantern-worker"])
        for _ in range(100):  # each worker's own metrics, through the shared port
            r = httpx.get(url + "/metrics")
            found = re.search(r'lantern_fleet_shared_recalls_total\{found="true"\} (\S+)', r.text)
            recalled[r.headers["x-lantern-worker"]] = float(found.group(1)) if found else 0.0
            if len(recalled) == 2:
                break
        # the tenant, then the tenant-scoped session key
        shared = redis.Redis.from_url(redis_url).hgetall(f"{redis_prefix}aff:acme:acme:s-1")
    finally:
        stop_processes([proc], timeout_s=30)
        delete_prefix(redis_url, redis_prefix)
    assert set(workers) == {"worker-0", "worker-1"}
    served = [sum(1 for q in u.requests if "words:3 hi" in q.body.decode()) for u in upstreams]
    assert sorted(served) == [0, 40]  # one replica took every call of the session
    assert shared[b"v"] == b"1"  # placed once, never moved
    assert set(recalled) == {"worker-0", "worker-1"}
    assert all(n > 0 for n in recalled.values())  # both read the shared entry
    assert proc.returncode == 0
