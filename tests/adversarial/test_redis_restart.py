"""A Redis restart, as a gateway's pooled connections see it (a TCP proxy the test controls
drops every one of them; the shared Redis is never restarted): no call of a tenant whose policy
fails closed while Redis is down is refused because a pooled connection was stale."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from gateway.core.admission import REDIS_KEY_PREFIX
from tests.adversarial.ledger_harness import KEY, GatewayProcess, gateway_config, running
from tests.fakes.tcp_cut import TcpCut
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.redis, pytest.mark.slow]
NUM_CALLS = 10


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        fake.app.delay_s = 0.2  # calls overlap: the pool holds several connections
        yield fake


def burst(url: str) -> list[int]:
    def one(n: int) -> int:
        body = {
            "model": "gpt-4o-mini",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": f"call {n}"}],
        }
        headers = {"authorization": f"Bearer {KEY}"}
        reply = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        return reply.status_code

    with ThreadPoolExecutor(NUM_CALLS) as pool:
        return list(pool.map(one, range(NUM_CALLS)))


def test_stale_pooled_connections_fail_no_call_of_a_fail_closed_tenant(
    upstream: FakeUpstream, redis_url: str, tmp_path: Path
) -> None:
    target = redis.connection.parse_url(redis_url)
    proxy = TcpCut((target.get("host", "127.0.0.1"), int(target.get("port", 6379))))
    proxy.restore()
    tenant = f"closed-{uuid.uuid4().hex[:10]}"
    config = gateway_config(
        tmp_path / "var",
        upstream,
        f"sqlite:///{tmp_path}/var/lantern.db",
        tenant=tenant,
        limits={"tokens_per_minute": 10_000_000, "on_store_down": {"rates": "fail_closed"}},
        redis_url=f"redis://127.0.0.1:{proxy.port}/{target.get('db', 0)}",
    )
    try:
        with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
            assert burst(gateway.url) == [200] * NUM_CALLS  # the pool is warm
            proxy.cut()  # every pooled connection dies, as in a Redis restart
            proxy.restore()
            assert burst(gateway.url) == [200] * NUM_CALLS
            proxy.cut()  # Redis really down: the tenant's policy still fails closed
            assert burst(gateway.url) == [503] * NUM_CALLS
    finally:
        proxy.cut()
        client = redis.Redis.from_url(redis_url)
        found = list(client.scan_iter(match=f"{REDIS_KEY_PREFIX}{{{tenant}}}*"))
        if found:
            client.delete(*found)
        client.close()
