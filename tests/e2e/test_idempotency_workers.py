"""Issue 34 as it is shown: `lantern serve --workers 2` with Redis in front of the wire-level
fake, each case with its own marker so the fake's log counts upstream calls; and a gateway
killed with SIGKILL mid-stream, whose record a retry takes over once its lease ran out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa

from bench._procs import free_port
from tests.e2e.conftest import models_for
from tests.e2e.harness import stop_processes, wait_healthy, write_config, write_policy
from tests.fakes.reply_plan import VOCAB
from tests.fakes.upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]
ACME = {"authorization": "Bearer lt-acme-replay-key-0001"}
OTHER = {"authorization": "Bearer lt-other-replay-key-0002"}
pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _serve(tmp: Path, upstream: FakeUpstream, redis_url: str, *extra: str, **replay: Any) -> tuple[subprocess.Popen[bytes], str]:  # fmt: skip
    policies = tmp / "policies"
    policies.mkdir(exist_ok=True)
    write_policy(policies, "acme", ACME["authorization"][7:], models=["gpt-4o-mini", "claude-sonnet-4-5"])  # fmt: skip
    write_policy(policies, "other", OTHER["authorization"][7:], models=["gpt-4o-mini"])
    config = write_config(
        tmp / "l.yaml",
        tmp,
        models_for(upstream)[:2],
        redis_url=redis_url,
        replay=replay,
        fleet={"health_interval_s": 3600, "signal_interval_s": 0},
    )
    port = free_port()
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
    log = tmp / f"gw-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port), *extra],
            cwd=REPO,
            env=dict(os.environ),
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, log)
    return proc, url


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def _calls(upstream: FakeUpstream, marker: str) -> int:
    return sum(1 for r in upstream.requests if marker.encode() in r.body)


def _key() -> dict[str, str]:
    return {"Idempotency-Key": uuid.uuid4().hex}


def _chat(marker: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": marker}], **extra}


def _stream(url: str, body: dict[str, Any], headers: dict[str, str], num_lines: int | None = None) -> bytes:  # fmt: skip
    data = b""
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=30) as r:  # fmt: skip
        assert r.status_code == 200, r.read()
        for num, line in enumerate(r.iter_lines()):
            data += line.encode() + b"\n"
            if num_lines is not None and num + 1 >= num_lines:
                break
    return data


def _text(sse: bytes) -> str:
    chunks = [orjson.loads(line[6:]) for line in sse.splitlines() if line.startswith(b"data: {")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _words(n: int) -> str:
    return " ".join((VOCAB * (n // len(VOCAB) + 1))[:n])


def _concurrent(url: str, body: dict[str, Any], headers: dict[str, str], n: int) -> list[httpx.Response]:  # fmt: skip
    """`n` clients at once, each retrying its 409s after the Retry-After it is told."""
    replies: list[httpx.Response] = []

    def one() -> None:
        while True:
            r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
            if r.status_code != 409:
                replies.append(r)
                return
            time.sleep(float(r.headers["retry-after"]))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return replies


def test_how_it_is_shown_two_workers_with_redis(
    tmp_path: Path, upstream: FakeUpstream, redis_url: str
) -> None:
    proc, url = _serve(tmp_path, upstream, redis_url, "--workers", "2")
    chat = url + "/v1/chat/completions"
    try:
        # the same key twice: one call, the same body, replayed (seen across the two workers)
        crossed = 0
        for n in range(40):
            key, body = _key(), _chat(f"m-twice-{n} words:7")
            first = httpx.post(chat, json=body, headers=ACME | key)
            again = httpx.post(chat, json=body, headers=ACME | key)
            assert (again.content, again.headers["idempotent-replayed"]) == (first.content, "true")
            assert _calls(upstream, f"m-twice-{n} ") == 1
            crossed += first.headers["x-lantern-worker"] != again.headers["x-lantern-worker"]
            if crossed >= 2 and n >= 3:
                break
        assert crossed >= 2  # replayed by the worker that did not run it
        # a changed body with that key
        changed = httpx.post(chat, json=_chat("m-twice-0 words:8"), headers=ACME | key)
        assert (changed.status_code, changed.json()["error"]["code"]) == (422, "idempotency_key_reused")  # fmt: skip
        # 8 concurrent identical calls: one upstream call, one body for all
        upstream.app.delay_s = 0.5
        replies = _concurrent(url, _chat("m-eight words:6"), ACME | _key(), 8)
        upstream.app.delay_s = 0.0
        assert [r.status_code for r in replies] == [200] * 8
        assert len({r.content for r in replies}) == 1
        assert sum(r.headers.get("idempotent-replayed") == "true" for r in replies) == 7
        assert _calls(upstream, "m-eight") == 1
        # a streamed call twice: one call, the same text and usage
        key, body = _key(), _chat("m-stream words:12", stream=True, stream_options={"include_usage": True})  # fmt: skip
        one, two = _stream(url, body, ACME | key), _stream(url, body, ACME | key)
        assert one == two and _text(one) == _words(12) and b'"completion_tokens":12' in one
        assert _calls(upstream, "m-stream") == 1
        # a stream dropped after 3 chunks and retried: the whole text, one call
        upstream.app.chunk_delay_s = 0.05
        key, body = _key(), _chat("m-drop words:30", stream=True)
        cut = _stream(url, body, ACME | key, num_lines=6)
        whole = _stream(url, body, ACME | key)
        upstream.app.chunk_delay_s = 0.0
        assert whole.startswith(cut) and whole.rstrip().endswith(b"data: [DONE]")
        assert _text(whole) == _words(30) and _calls(upstream, "m-drop") == 1
        # /v1/messages and /v1/responses
        key = _key()
        asked = {"model": "claude-sonnet-4-5", "max_tokens": 30, "messages": [{"role": "user", "content": "m-msg words:4"}]}  # fmt: skip
        m1, m2 = (httpx.post(url + "/v1/messages", json=asked, headers=ACME | key) for _ in "12")
        assert m1.status_code == 200 and m2.content == m1.content and _calls(upstream, "m-msg") == 1
        key, asked = _key(), {"model": "gpt-4o-mini", "input": "m-resp words:3"}
        r1, r2 = (httpx.post(url + "/v1/responses", json=asked, headers=ACME | key) for _ in "12")
        assert (
            r1.status_code == 200 and r2.content == r1.content and _calls(upstream, "m-resp") == 1
        )
        # another tenant with the same key runs its own call
        key, body = _key(), _chat("m-tenant words:3")
        mine = httpx.post(chat, json=body, headers=ACME | key)
        theirs = httpx.post(chat, json=body, headers=OTHER | key)
        assert "idempotent-replayed" not in theirs.headers and mine.json()["id"] != theirs.json()["id"]  # fmt: skip
        assert _calls(upstream, "m-tenant") == 2
    finally:
        stop_processes([proc], timeout_s=30)
    # the ledger: one row per executed call, none for replays
    engine = sa.create_engine(f"sqlite:///{tmp_path}/lantern.db")
    with engine.connect() as db:
        num_rows = db.execute(sa.text("select count(*) from usage")).scalar_one()
    engine.dispose()
    executed = sum(1 for r in upstream.requests if b'"m-' in r.body)
    assert num_rows == executed == (n + 1) + 7  # the twice loop's, then one a case (two tenants)


def test_a_gateway_killed_mid_stream_is_taken_over_after_its_lease(
    tmp_path: Path, upstream: FakeUpstream, redis_url: str
) -> None:
    first, url = _serve(tmp_path, upstream, redis_url, lease_s=1.0)
    upstream.app.chunk_delay_s = 0.05
    key, body = _key(), _chat("m-kill words:30", stream=True)
    try:
        cut = _stream(url, body, ACME | key, num_lines=6)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second, url = _serve(tmp_path, upstream, redis_url, lease_s=1.0)
        time.sleep(1.2)  # past the dead owner's lease
        whole = _stream(url, body, ACME | key)
        again = _stream(url, body, ACME | key)
    finally:
        upstream.app.chunk_delay_s = 0.0
        stop_processes([first, *([second] if "second" in locals() else [])])
    assert _text(cut) and _text(whole) == _words(30) and whole.rstrip().endswith(b"data: [DONE]")
    assert again == whole
    assert _calls(upstream, "m-kill") == 2  # the dead gateway's call, and the one taking over
