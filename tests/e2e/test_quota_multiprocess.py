"""Zero overrun across processes: 4 `lantern serve` processes share the real Redis and the real
PostgreSQL ledger; 400 concurrent calls from one tenant whose token limit admits far fewer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from bench._procs import free_port
from gateway.ledger.db import create_ledger_engine
from gateway.ledger.models import UsageRecord
from tests.e2e.harness import (
    drop_tenant_keys,
    stop_processes,
    wait_healthy,
    write_config,
    write_policy,
)

REPO = Path(__file__).resolve().parents[2]
NUM_GATEWAYS = 4
NUM_CALLS = 400
ADMITS = 25  # the limit is set to admit this many of the 400 reservations
OUTPUT_TOKENS = 20
FALLBACK = 'lantern_quota_fallback_admissions_total{tenant="'
REJECTED = "lantern_quota_rejections_total"
BODY = {
    "model": "gpt-4o-mini",
    # the fake replies with exactly `words:N` tokens, so each call uses what it reserved
    "messages": [{"role": "user", "content": f"words:{OUTPUT_TOKENS} count the foxes"}],
    "max_tokens": OUTPUT_TOKENS,
}


def start_gateways(config: Path, var_dir: Path) -> list[tuple[subprocess.Popen[bytes], str]]:
    """Started one after another: each migrates the ledger schema at start-up."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    running: list[tuple[subprocess.Popen[bytes], str]] = []
    for n in range(NUM_GATEWAYS):
        port = free_port()
        log = open(var_dir / f"gateway-{n}.log", "wb")  # noqa: SIM115 - lives with the process
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=log
        )
        url = f"http://127.0.0.1:{port}"
        running.append((proc, url))
        wait_healthy(proc, url, var_dir / f"gateway-{n}.log")
    return running


@pytest.fixture
def upstream_url(var_dir: Path) -> Iterator[str]:
    """The fake upstream in its own process, so the 400 client calls do not slow it down."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.fakes.upstream", "--port", str(port)]
    log = var_dir / "upstream.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"fake upstream did not start: {log.read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def openai_model(upstream_url: str) -> dict[str, Any]:
    backend = {
        "kind": "openai_compatible",
        "name": "fake-openai",
        "base_url": upstream_url + "/v1",
        "model": "gpt-4o-mini",
        "timeout_s": 60,
        # the tenants' isolation travels as `cache_salt`, not as a scope line in the prompt,
        # whose keyed tag tokenises to a different length per tenant: the probe tenant's
        # reservation must be the busy tenant's, to the token
        "cache_salt": True,
    }
    return {"name": "gpt-4o-mini", "backends": [backend]}


@pytest.fixture
def gateways(
    upstream_url: str, var_dir: Path, redis_url: str, postgres_url: str
) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:10]
    tenants = {"probe": f"probe-{suffix}", "busy": f"busy-{suffix}"}
    keys = {name: f"lt-{name}-{suffix}-key" for name in tenants}
    write_policy(
        var_dir / "policies",
        tenants["probe"],
        keys["probe"],
        models=["gpt-4o-mini"],
        limits={"tokens_per_minute": 1_000_000},
    )
    config = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        [openai_model(upstream_url)],
        redis_url=redis_url,
        database_url=postgres_url,
    )
    running = start_gateways(config, var_dir)
    try:
        yield {"urls": [url for _, url in running], "tenants": tenants, "keys": keys}
    finally:
        stop_processes(proc for proc, _ in running)
        drop_tenant_keys(redis_url, tenants.values())


def reservation_size(url: str, key: str) -> int:
    """Tokens one call reserves (prompt as counted by the gateway + max_tokens), read back from
    the x-ratelimit headers of a call by a tenant with a wide limit."""
    reply = httpx.post(
        url + "/v1/chat/completions",
        json=BODY,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    limit = int(reply.headers["x-ratelimit-limit-tokens"])
    return limit - int(reply.headers["x-ratelimit-remaining-tokens"])


async def fire(urls: list[str], key: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=NUM_CALLS, max_keepalive_connections=NUM_CALLS)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        calls = [
            client.post(
                urls[i % len(urls)] + "/v1/chat/completions",
                json=BODY,
                headers={"authorization": f"Bearer {key}"},
            )
            for i in range(NUM_CALLS)
        ]
        return list(await asyncio.gather(*calls))


def ledger_rows(postgres_url: str, tenant: str) -> list[Any]:
    engine = create_ledger_engine(postgres_url)
    try:
        with engine.connect() as conn:
            query = sa.select(UsageRecord).where(UsageRecord.tenant == tenant)
            return list(conn.execute(query).all())
    finally:
        engine.dispose()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.postgres
def test_one_tenant_never_overruns_its_token_limit_across_four_gateways(
    gateways: dict[str, Any], var_dir: Path, postgres_url: str
) -> None:
    urls, tenants, keys = gateways["urls"], gateways["tenants"], gateways["keys"]
    per_call = reservation_size(urls[0], keys["probe"])
    limit = ADMITS * per_call + per_call // 2
    write_policy(
        var_dir / "policies",
        tenants["busy"],
        keys["busy"],
        models=["gpt-4o-mini"],
        limits={"tokens_per_minute": limit, "on_store_down": {"rates": "fail_closed"}},
    )
    time.sleep(2.0)  # every gateway's policy poller (0.5 s) has loaded the new tenant

    replies = asyncio.run(fire(urls, keys["busy"]))

    by_status = Counter(reply.status_code for reply in replies)
    odd = [r.text for r in replies if r.status_code not in (200, 429)]
    assert set(by_status) <= {200, 429, 502, 503, 504}, odd[:3]
    admitted = [r for r in replies if r.status_code == 200]
    rejected = [r for r in replies if r.status_code == 429]
    # each call uses exactly what it reserved, so only ADMITS calls can ever succeed. On this
    # loaded machine a few calls may fail instead: upstream errors (502/504, settled to zero, so
    # their slot may go unused) and Redis timeouts (503: the policy fails closed; a reply lost in
    # a timeout may hold one slot). Each costs at most one success; none can add one.
    failed = by_status[502] + by_status[503] + by_status[504]
    assert ADMITS - failed <= len(admitted) <= ADMITS, (by_status, odd[:3])
    assert by_status[429] >= NUM_CALLS - ADMITS - failed
    assert {r.json()["error"]["code"] for r in rejected} == {"tokens_per_minute"}
    assert all(int(r.headers["retry-after"]) >= 1 for r in rejected)
    rejected_by = 0
    for url in urls:  # no process admitted this tenant on its own store
        lines = httpx.get(url + "/metrics", timeout=10).text.splitlines()
        assert not [line for line in lines if line.startswith(FALLBACK + tenants["busy"])]
        prefix = f'{REJECTED}{{limit="tokens_per_minute",tenant="{tenants["busy"]}"}}'
        rejected_by += sum(int(float(ln.split()[-1])) for ln in lines if ln.startswith(prefix))
    assert rejected_by == by_status[429]

    deadline = time.monotonic() + 30
    rows = ledger_rows(postgres_url, tenants["busy"])
    while (
        len([r for r in rows if r.status == "ok"]) < len(admitted) and time.monotonic() < deadline
    ):
        time.sleep(0.5)
        rows = ledger_rows(postgres_url, tenants["busy"])
    ok_rows = [r for r in rows if r.status == "ok"]
    assert len(ok_rows) == len(admitted)  # every admitted call is recorded, once
    used = sum(
        r.input_tokens + r.cache_read_tokens + r.cache_write_tokens + r.output_tokens
        for r in ok_rows
    )
    assert used == len(admitted) * per_call
    assert used <= limit  # zero overrun
