"""Idempotency under fire: 4 OS processes (each its own ToolRunService, as 4 gateways would
be) share one database; real sandboxed runs; executions counted in a side-effect file."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from sandbox.idempotency import IdempotencyStore, tool_runs
from sandbox.local_runner import LocalRunner
from sandbox.service import ToolRunService
from sandbox.types import ToolRunRequest
from tests.sandbox.idempotency_worker import CountingRunner, tools

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
KEYS = [f"key-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(20)]


def _url(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _worker(
    db: str,
    counter: Path,
    marker: str,
    lease: float,
    sleep: float,
    start_at: float,
    keys: list[str],
    sequential: int,
) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "tests.sandbox.idempotency_worker",
        "--db",
        db,
        "--counter",
        str(counter),
        "--keys",
        ",".join(keys),
        "--marker",
        marker,
        "--lease",
        str(lease),
        "--sleep",
        str(sleep),
        "--start-at",
        str(start_at),
        "--sequential",
        str(sequential),
    ]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_200_retries_of_20_keys_from_4_processes_run_each_once(
    default_backend: str, engine: sa.Engine, tmp_path: Path
) -> None:
    counter = tmp_path / "executions.log"
    start_at = time.time() + 3
    workers = [
        _worker(_url(engine), counter, "fire", 10, 0.5, start_at, KEYS, 10) for _ in range(4)
    ]
    answers = []
    for proc in workers:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        answers += [json.loads(line) for line in out.splitlines()]
    assert len(answers) == 200
    executions = Counter(line.split()[0] for line in counter.read_text().splitlines())
    assert executions == Counter({key: 1 for key in KEYS})
    statuses = Counter(a["status"] for a in answers)
    assert set(statuses) <= {200, 409} and statuses[200] >= 20
    bodies: dict[str, set[str]] = {}
    for answer in answers:
        if answer["status"] == 200:
            bodies.setdefault(answer["key"], set()).add(answer["body"])
    assert sorted(bodies) == sorted(KEYS)
    assert all(len(variants) == 1 for variants in bodies.values())  # replays are identical
    for key, (body,) in bodies.items():
        assert (json.loads(body)["stdout"], json.loads(body)["status"]) == (
            f"ran {key}\n",
            "succeeded",
        )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(tool_runs)).scalar() == 20


def _leftovers(marker: str, prefix: bytes = b"") -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            if marker.encode() in cmdline and cmdline.startswith(prefix):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_for(predicate, timeout_s: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, "condition not reached"
        time.sleep(0.05)


def test_gateway_killed_mid_run_never_runs_the_tool_again(
    default_backend: str, engine: sa.Engine, tmp_path: Path
) -> None:
    counter, marker, key = tmp_path / "executions.log", f"victim-{uuid.uuid4().hex}", KEYS[0]
    victim = _worker(_url(engine), counter, marker, 1.0, 30, 0, [key], 0)
    _wait_for(lambda: counter.exists() and counter.read_text().count("\n") == 1)
    _wait_for(lambda: len(_leftovers(marker, b"sh\x00-c\x00")) == 1)  # the tool is running
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    _wait_for(lambda: _leftovers(marker) == [], 10)  # --die-with-parent took the box down

    store = IdempotencyStore(engine, time.time, lease_s=1.0)
    local = LocalRunner(logging.getLogger("t"))
    runner = CountingRunner(local, str(counter))
    service = ToolRunService(store, runner, time.time, logging.getLogger("t"))
    request = ToolRunRequest("acme", "key-id", key, "slow_echo", (("word", key),))
    _wait_for(
        lambda: (row := store.find("acme", key)) is not None and row.lease_expires_at < time.time()
    )
    reply = asyncio.run(service.submit(tools(30.0, marker), request))
    assert reply.http_status == 500
    assert json.loads(reply.body)["error"]["code"] == "tool_run_outcome_unknown"
    again = asyncio.run(service.submit(tools(30.0, marker), request))
    assert (again.body, again.replayed) == (reply.body, True)
    assert counter.read_text().count("\n") == 1
    local.close()
