"""Issue 35 across processes: `lantern serve --workers 2` with Redis in front of a replica of 4
slots (`max_in_flight: 4`). Both workers take calls of a flood, and the replica never serves
more than 4 at once: the workers share its slots through Redis instead of each assuming all 4."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from bench._procs import free_port
from tests.e2e.harness import stop_processes, wait_healthy, write_config, write_policy
from tests.e2e.test_scaleout_workers import serve
from tests.fakes.upstream import FakeUpstream
from tests.quotas.conftest import delete_prefix

pytestmark = [pytest.mark.slow, pytest.mark.redis]
KEY = "lt-fair-workers-key-0001"
SLOTS = 4


async def flood(url: str, n: int) -> list[tuple[int, str]]:
    """`n` calls at once, each on its own connection (the kernel spreads them over the
    workers); each one's status and the worker that answered."""

    async def one(i: int) -> tuple[int, str]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"c{i}"}]}
            r = await client.post(
                "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
            )
            return r.status_code, r.headers.get("x-lantern-worker", "")

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def test_two_workers_share_a_replicas_slots(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, routing={"max_queue_ms": 30000})
    with FakeUpstream() as upstream:
        # the fake serves everything it gets (no batch limit of its own) and counts at once
        upstream.app.max_concurrent, upstream.app.delay_s = 1000, 0.2
        backend = {
            "kind": "openai_compatible",
            "name": "replica",
            "base_url": upstream.openai_base_url,
            "model": "gpt-4o-mini",
            "timeout_s": 30,
            "metrics_path": None,
            "max_in_flight": SLOTS,
        }
        fleet = {
            "signal_interval_s": 0,
            "health_interval_s": 3600,
            "shared_key_prefix": redis_prefix,
        }
        models = [{"name": "gpt-4o-mini", "backends": [backend]}]
        config = write_config(
            tmp_path / "l.yaml", tmp_path, models, redis_url=redis_url, fleet=fleet
        )
        port, log = free_port(), tmp_path / "gw.log"
        proc = serve(config, port, log, "--workers", "2")
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}", log)
            replies = asyncio.run(flood(f"http://127.0.0.1:{port}", 48))
        finally:
            stop_processes([proc], timeout_s=30)
            delete_prefix(redis_url, redis_prefix)
        peak = upstream.app.peak_concurrent
    assert [s for s, _ in replies] == [200] * 48
    assert {w for _, w in replies} == {"worker-0", "worker-1"}  # both took calls
    assert peak == SLOTS  # each worker alone would have sent up to 4
