"""Four `lantern serve` processes (shared Redis and PostgreSQL) in front of two bundled-engine
replicas: each session's calls go to a different gateway each time, yet the engines report the
cache hit rate of the same traffic through one gateway (within 2 points), and each session stays
on one replica unless a gateway logged that the router moved it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from bench._procs import free_port
from tests.e2e.harness import stop_processes, write_config, write_policy
from tests.quotas.conftest import delete_prefix

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres]
REPO = Path(__file__).resolve().parents[2]
KEY = "lt-scale-engines-key-000000000001"
NUM_GATEWAYS, NUM_SESSIONS, NUM_CALLS = 4, 4, 3
TOPICS = ("lanterns", "rivers", "owls", "bridges")


def start_engine(tmp: Path, n: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "selfhost", "--model", "default", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--threads", "1", "--no-cpu-kernels"]
    out = open(tmp / f"engine-{n}.log", "wb")  # noqa: SIM115 - lives with the process
    return subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out), f"http://127.0.0.1:{port}"


def wait_engine(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"engine at {url} did not start")


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Until /ready says so (start-up probes both engines with a real generation: slow on a
    busy CPU, hence the long bound)."""
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"gateway at {url} not ready:\n{log.read_text()[-3000:]}")


@pytest.fixture
def fleet(
    tmp_path: Path, redis_url: str, redis_prefix: str, postgres_url: str
) -> Iterator[tuple[list[str], Path, str]]:
    engines = [start_engine(tmp_path, n) for n in range(2)]
    gateways: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for proc, url in engines:
            wait_engine(proc, url)
        (tmp_path / "policies").mkdir()
        # like with like: the tenant never trades its cache for load here, so both runs keep
        # what affinity and the shared index keep; a move for load depends on which calls happen
        # to be in flight at the moment (timing, not topology), and one costs ~5 points
        routing = {"stickiness_gate_s": 60.0}
        write_policy(tmp_path / "policies", "acme", KEY, routing=routing)
        backend = {
            "kind": "selfhost",
            "name": "smol",
            "base_url": engines[0][1] + "/v1",
            "replicas": [engines[1][1] + "/v1"],
            "timeout_s": 120,
        }
        config = write_config(
            tmp_path / "lantern.yaml",
            tmp_path,
            [{"name": "smollm2", "backends": [backend]}],
            database_url=postgres_url,
            redis_url=redis_url,
            fleet={"shared_key_prefix": redis_prefix},
            prices={"smollm2": {"input": 0.02, "output": 0.04}},
        )
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        for n in range(NUM_GATEWAYS):  # started together: migrations take an advisory lock
            port, log = free_port(), open(tmp_path / f"gw-{n}.log", "wb")  # noqa: SIM115
            argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
            proc = subprocess.Popen(
                [*argv, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=log
            )
            gateways.append((proc, f"http://127.0.0.1:{port}"))
        for n, (proc, url) in enumerate(gateways):
            wait_ready(proc, url, tmp_path / f"gw-{n}.log")
        yield [url for _, url in gateways], tmp_path, postgres_url
    finally:
        stop_processes([p for p, _ in gateways], timeout_s=30)
        stop_processes([p for p, _ in engines])
        delete_prefix(redis_url, redis_prefix)


def post(url: str, messages: list[dict[str, str]], session: str) -> httpx.Response:
    """One call; a 503 `no_route` (both replicas drained after a probe timed out on a busy CPU)
    is retried as its message says: it reached no engine, so the cache figures are unchanged."""
    body = {"model": "smollm2", "messages": messages, "max_tokens": 6, "temperature": 0}
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": session}
    for _ in range(90):
        r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=180)
        if r.status_code != 503 or '"no_route"' not in r.text:
            return r
        time.sleep(2.0)
    return r


def run_traffic(urls: list[str], run: str, spread: bool) -> tuple[int, int]:
    """NUM_SESSIONS concurrent sessions of NUM_CALLS growing calls each; call i of session s
    goes to gateway (s + i) % n when `spread`, else to the first. (cached, prompt) tokens."""
    totals = [0, 0]
    lock = threading.Lock()

    def session(s: int) -> None:
        messages = [
            {
                "role": "system",
                "content": f"Run {run}. You answer in one short line about {TOPICS[s]}.",
            },
        ]
        for i in range(NUM_CALLS):
            messages.append({"role": "user", "content": f"Question {i + 1} about {TOPICS[s]}?"})
            url = urls[(s + i) % len(urls)] if spread else urls[0]
            r = post(url, messages, f"{run}-{s}")
            assert r.status_code == 200, r.text
            body = r.json()
            # a fixed answer in the history: both runs' prompts then have the same tokens but
            # the run tag, so their cache figures differ only by where the calls were routed
            messages.append({"role": "assistant", "content": f"Answer {i + 1} about {TOPICS[s]}."})
            usage = body["usage"]
            with lock:
                totals[0] += usage["prompt_tokens_details"]["cached_tokens"]
                totals[1] += usage["prompt_tokens"]

    threads = [threading.Thread(target=session, args=(s,)) for s in range(NUM_SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return totals[0], totals[1]


def test_sessions_spread_over_four_gateways_keep_their_cache(
    fleet: tuple[list[str], Path, str],
) -> None:
    urls, tmp, postgres_url = fleet
    one_cached, one_prompt = run_traffic(urls, "A", spread=False)
    four_cached, four_prompt = run_traffic(urls, "B", spread=True)
    assert one_prompt == four_prompt > 0
    one, four = one_cached / one_prompt, four_cached / four_prompt
    logs = "".join((tmp / f"gw-{n}.log").read_text() for n in range(NUM_GATEWAYS))
    # one call that loses its cache costs ~5 points here: the router's moves and drains (each
    # logged with its reason) are what to read first when the rates differ
    events = [line for line in logs.splitlines() if " moved from " in line or " drained " in line]
    assert abs(one - four) <= 0.02, (one, four, events)
    moved = set(re.findall(r"session (\S+) moved from", logs))
    time.sleep(2.0)  # the ledger writer's linger
    engine = sa.create_engine(postgres_url)
    replicas: dict[str, set[str]] = defaultdict(set)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as db:
            rows = db.execute(
                sa.text("select session_id, replica from usage where status = 'ok'")
            ).all()
        if len(rows) >= 2 * NUM_SESSIONS * NUM_CALLS:
            break
        time.sleep(0.5)
    engine.dispose()
    for session_id, replica in rows:
        replicas[session_id].add(replica)
    spread_sessions = [f"B-{s}" for s in range(NUM_SESSIONS)]
    assert all(s in replicas for s in spread_sessions)
    for s in spread_sessions:
        assert len(replicas[s]) == 1 or s in moved, (s, replicas[s])
    assert len(rows) == 2 * NUM_SESSIONS * NUM_CALLS
