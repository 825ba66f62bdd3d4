"""Learnt cache places across processes: two `lantern serve` processes share the real Redis. A
place one of them learnt in a tenant's session is relocated from the first call of the tenant's
next session served by the other; another tenant's sessions there are untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from bench._procs import free_port
from gateway.core.cache_learning_shared import KEY_PREFIX
from tests.e2e.harness import stop_processes, wait_healthy, write_config, write_policy
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-5"
SYSTEM = "Build {} of the workspace. Follow the rules." + " rule" * 1200


class Clock:
    now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _body(build: int, task: str, turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task + " a" * 300}]
    for t in range(1, turns):
        use = {"type": "tool_use", "id": f"t{t}", "name": "run", "input": {"n": t}}
        result = {"type": "tool_result", "tool_use_id": f"t{t}", "content": "ok" + " b" * 200}
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
    return {
        "model": MODEL,
        "max_tokens": 20,
        "system": SYSTEM.format(build),
        "messages": messages,
    }


def _start(var_dir: Path, upstream: FakeUpstream, redis_url: str, keys: dict[str, str]) -> Any:
    (var_dir / "policies").mkdir(parents=True)
    for tenant, key in keys.items():
        write_policy(var_dir / "policies", tenant, key, models=[MODEL])
    backend = {
        "kind": "anthropic",
        "name": "fake",
        "base_url": upstream.base_url,
        "model": MODEL,
        "api_key_env": None,
        "timeout_s": 10,
    }
    config = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        [{"name": MODEL, "backends": [backend]}],
        redis_url=redis_url,
    )
    port = free_port()
    log_path = var_dir / "gateway.log"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=log
        )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, log_path)
    return proc, url


@pytest.fixture
def two_gateways(tmp_path: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:10]
    keys = {f"acme-{suffix}": f"lt-acme-{suffix}-key", f"globex-{suffix}": f"lt-gx-{suffix}-key"}
    with FakeUpstream(cache=PromptCacheFake(Clock())) as upstream:
        running = []
        try:
            for name in ("a", "b"):
                running.append(_start(tmp_path / name, upstream, redis_url, keys))
            yield {"urls": [url for _, url in running], "keys": keys, "upstream": upstream}
        finally:
            stop_processes(proc for proc, _ in running)
            client = redis.Redis.from_url(redis_url)
            client.delete(*(f"{KEY_PREFIX}{{{tenant}}}" for tenant in keys))
            client.close()


def _call(url: str, key: str, body: dict[str, Any]) -> httpx.Response:
    reply = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": key}, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply


def test_a_place_learnt_in_one_process_is_relocated_by_the_other(
    two_gateways: dict[str, Any], redis_url: str
) -> None:
    a, b = two_gateways["urls"]
    (acme, acme_key), (globex, globex_key) = two_gateways["keys"].items()
    upstream: FakeUpstream = two_gateways["upstream"]
    headers = [_call(a, acme_key, _body(100 + t, "Fix the test.", t + 1)) for t in range(3)]
    assert headers[0].headers["x-lantern-cache"].startswith("first_call; prefix=")
    assert headers[1].headers["x-lantern-cache"].startswith("kept; relocated=learned; ")
    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 10
    while not client.zcard(f"{KEY_PREFIX}{{{acme}}}") and time.monotonic() < deadline:
        time.sleep(0.05)  # written off the request path
    client.close()
    # the tenant's next session, its first call served by the other process
    first = _call(b, acme_key, _body(205, "Review the pull request.", 1))
    assert first.headers["x-lantern-cache"].startswith("first_call; relocated=learned; ")
    sent = upstream.requests[-1].json()
    assert "Build {{volatile:1}} of the workspace." in _system(sent)  # after the scope line
    assert "{{volatile:1}} = 205" in sent["messages"][-1]["content"][-1]["text"]
    # another tenant on the same process: nothing relocated for it
    other = _call(b, globex_key, _body(205, "Review the pull request.", 1))
    assert other.headers["x-lantern-cache"].startswith("first_call; prefix=")
    assert "Build 205 of the workspace." in _system(upstream.requests[-1].json())


def _system(sent: dict[str, Any]) -> str:
    system = sent["system"]
    return system if isinstance(system, str) else "".join(p["text"] for p in system)


def test_with_redis_unreachable_a_process_learns_alone_and_no_call_fails(tmp_path: Path) -> None:
    keys = {"acme": "lt-acme-down-key"}
    with FakeUpstream(cache=PromptCacheFake(Clock())) as upstream:
        proc, url = _start(tmp_path, upstream, "redis://127.0.0.1:1/0", keys)
        try:
            replies = [_call(url, keys["acme"], _body(100 + t, "Fix.", t + 1)) for t in range(3)]
            assert replies[1].headers["x-lantern-cache"].startswith("kept; relocated=learned; ")
            later = _call(url, keys["acme"], _body(300, "Review.", 1))
            assert later.headers["x-lantern-cache"].startswith("first_call; relocated=learned; ")
        finally:
            stop_processes([proc])
