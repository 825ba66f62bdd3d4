"""One tenant can never hurt another: a real `lantern serve` process with the quotas in the real
Redis, two tenants sharing one backend (a wire-level fake that refuses like vLLM past its
context window). Tenant A sends about 100 calls that fail in every way a client can make them
fail (upstream 400s, a max_tokens that does not fit, a body the gateway cannot re-encode,
streams closed early, over-long, control-character and non-Latin-1 identifiers) and some that
omit max_tokens (the gateway's default must be lowered to fit); tenant B's calls interleaved
with them all succeed. Afterwards A holds no concurrency slot, no dollars and no token beyond
what the ledger says it used, and every call that reached the upstream has its ledger row."""

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
from gateway.core.admission import REDIS_KEY_PREFIX
from gateway.ledger.db import create_ledger_engine
from gateway.ledger.models import UsageRecord
from quotas.limits import Limits
from quotas.redis_store import RedisQuotaStore
from tests.e2e.harness import (
    drop_tenant_keys,
    stop_processes,
    wait_healthy,
    write_config,
    write_policy,
)
from tests.fakes.upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]
WINDOW = 1024  # the fake replica's max_model_len
A_CONCURRENCY = 4  # A's concurrent_requests; its 4 workers would meet a 429 if a slot leaked
B_CALLS = 40
A_ROUNDS = 10  # each round: one call of every kind in A_KINDS
LIMITS = {
    "concurrent_requests": A_CONCURRENCY,
    "tokens_per_minute": 10_000_000,
    "max_output_tokens": 4096,  # over the window: a filled-in default must be lowered
}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


# kind -> (what A sends, the status A must get, whether the call reaches the upstream)
A_KINDS: dict[str, tuple[dict[str, Any], int, bool]] = {
    "upstream_400": ({"content": "status:400 please"}, 400, True),
    "max_tokens_does_not_fit": ({"max_tokens": 4000}, 400, False),
    "max_tokens_omitted": ({"max_tokens": None}, 200, True),
    "nested_300": ({"extra": {"metadata_x": _nested(300)}}, 400, False),  # http.max_json_depth
    "stream_closed_early": ({"stream": True, "content": "slow:stream words:60"}, 200, True),
    "long_session": ({"session": "s" * 300}, 400, False),
    "control_session": ({"session": "a\tb"}, 400, False),
    "non_latin1_session": ({"session": "sess-会话".encode()}, 400, False),
    "control_cache_key": ({"extra": {"prompt_cache_key": "k\x01"}}, 400, False),
    "long_cache_key": ({"extra": {"prompt_cache_key": "k" * 257}}, 400, False),
}


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream(max_model_len=WINDOW) as fake:
        yield fake


@pytest.fixture
def gateway(upstream: FakeUpstream, tmp_path: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:10]
    tenants = {"a": f"careless-{suffix}", "b": f"neighbour-{suffix}"}
    keys = {name: f"lt-{name}-{suffix}-key" for name in tenants}
    (tmp_path / "policies").mkdir()
    for name, tenant in tenants.items():
        write_policy(tmp_path / "policies", tenant, keys[name], limits=LIMITS)
    backend = {
        "kind": "openai_compatible",
        "name": "shared-replica",
        "base_url": upstream.openai_base_url,
        "model": "gpt-4o-mini",
        "timeout_s": 30,
    }
    config = write_config(
        tmp_path / "lantern.yaml",
        tmp_path,
        [{"name": "gpt-4o-mini", "backends": [backend]}],
        redis_url=redis_url,
    )
    port = free_port()
    log = tmp_path / "gateway.log"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], cwd=REPO, env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log)
        yield {"url": url, "tenants": tenants, "keys": keys, "db": tmp_path / "lantern.db"}
    finally:
        stop_processes([proc])
        drop_tenant_keys(redis_url, tenants.values())


def _request(key: str, n: int, spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    content = f"call {n}: " + spec.get("content", "words:8 hello")
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": spec.get("max_tokens", 16),
        **spec.get("extra", {}),
    }
    if body["max_tokens"] is None:
        del body["max_tokens"]
    if spec.get("stream"):
        body["stream"] = True
    headers: dict[str, Any] = {"authorization": f"Bearer {key}"}
    if "session" in spec:
        headers["x-session-id"] = spec["session"]
    return body, headers


async def _send(client: httpx.AsyncClient, url: str, key: str, n: int, spec: dict[str, Any]) -> int:
    body, headers = _request(key, n, spec)
    if not spec.get("stream"):
        reply = await client.post(url + "/v1/chat/completions", json=body, headers=headers)
        return reply.status_code
    async with client.stream(
        "POST", url + "/v1/chat/completions", json=body, headers=headers
    ) as reply:
        async for _ in reply.aiter_bytes():
            break  # the user pressed stop after the first chunk
        return reply.status_code


async def _tenant_a(url: str, key: str) -> list[tuple[str, int]]:
    work = [kind for _ in range(A_ROUNDS) for kind in A_KINDS]
    results: list[tuple[str, int]] = []
    async with httpx.AsyncClient(timeout=60) as client:

        async def worker(offset: int) -> None:
            for n in range(offset, len(work), A_CONCURRENCY):
                kind = work[n]
                results.append((kind, await _send(client, url, key, n, A_KINDS[kind][0])))

        await asyncio.gather(*(worker(i) for i in range(A_CONCURRENCY)))
    return results


async def _tenant_b(url: str, key: str) -> list[int]:
    statuses = []
    async with httpx.AsyncClient(timeout=60) as client:
        for n in range(B_CALLS):
            spec: dict[str, Any] = {"session": f"b-session-{n % 3}"}
            if n % 2:
                spec["max_tokens"] = None  # the gateway fills it in, lowered to fit
            body, headers = _request(key, 1000 + n, spec)
            reply = await client.post(url + "/v1/chat/completions", json=body, headers=headers)
            statuses.append(reply.status_code)
            await asyncio.sleep(0.02)  # interleaved with A's calls
    return statuses


async def _both(url: str, keys: dict[str, str]) -> tuple[list[tuple[str, int]], list[int]]:
    a, b = await asyncio.gather(_tenant_a(url, keys["a"]), _tenant_b(url, keys["b"]))
    return a, b


def _rows(db: Path, tenant: str) -> list[Any]:
    engine = create_ledger_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(UsageRecord).where(UsageRecord.tenant == tenant)))
    finally:
        engine.dispose()


def _settled_rows(db: Path, tenant: str, expected: int) -> list[Any]:
    deadline = time.monotonic() + 30
    rows = _rows(db, tenant)
    while len(rows) < expected and time.monotonic() < deadline:
        time.sleep(0.25)
        rows = _rows(db, tenant)
    return rows


async def _quota_use(redis_url: str, tenant: str) -> Any:
    store = RedisQuotaStore.from_url(redis_url, key_prefix=REDIS_KEY_PREFIX)
    try:
        limits = Limits(tokens_per_minute=10_000_000, concurrent_requests=A_CONCURRENCY)
        return await store.usage(tenant, limits, now_ms=int(time.time() * 1000))
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.redis
def test_a_careless_tenant_never_hurts_its_neighbour(
    gateway: dict[str, Any], upstream: FakeUpstream, redis_url: str
) -> None:
    url, tenants, keys = gateway["url"], gateway["tenants"], gateway["keys"]
    started = time.monotonic()
    a_results, b_statuses = asyncio.run(_both(url, keys))

    assert Counter(b_statuses) == {200: B_CALLS}  # zero failures for the neighbour
    by_kind: dict[str, Counter[int]] = {}
    for kind, status in a_results:
        by_kind.setdefault(kind, Counter())[status] += 1
    for kind, (_, status, _) in A_KINDS.items():
        assert by_kind[kind] == {status: A_ROUNDS}, (kind, by_kind[kind])

    reaching = sum(A_ROUNDS for _, _, reaches in A_KINDS.values() if reaches)
    a_rows = _settled_rows(gateway["db"], tenants["a"], reaching)
    b_rows = _settled_rows(gateway["db"], tenants["b"], B_CALLS)
    assert Counter(r.status for r in b_rows) == {"ok": B_CALLS}
    a_status = Counter((r.status, r.error_kind) for r in a_rows)
    assert a_status == {
        ("error", "ProviderRejected"): A_ROUNDS,  # the upstream's 400s
        ("ok", None): A_ROUNDS,  # max_tokens omitted: lowered to fit
        ("client_disconnect", None): A_ROUNDS,
    }
    # every call the upstream answered has its ledger row (health probes aside)
    served = [r for r in upstream.requests if b"call " in r.body]
    assert len(served) == reaching + B_CALLS

    use = asyncio.run(_quota_use(redis_url, tenants["a"]))
    assert (use.concurrent, use.held_micro_usd) == (0, 0)
    used = sum(
        r.input_tokens + r.cache_read_tokens + r.cache_write_tokens + r.output_tokens
        for r in a_rows
    )
    if time.monotonic() - started < 55:  # the whole run is inside the one-minute token window
        assert use.tokens_used == used
    else:
        assert use.tokens_used <= used
