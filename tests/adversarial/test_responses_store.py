"""The Responses door when its store misbehaves, through a real gateway: Redis cut under the
shared store is a 503 the client can retry (never a 500), nothing reserved or sent upstream, and
the stored response is there again once Redis is back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.tcp_cut import TcpCut
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.redis]


@pytest.fixture
def cut_gateway(
    redis_url: str, tmp_path: Path
) -> Iterator[tuple[RunningGateway, TcpCut, FakeUpstream, str]]:
    """A gateway whose Redis (quotas and responses) is reached through a proxy the test cuts;
    the tenant's name is unique to the run (the machine's Redis is shared)."""
    target = redis.connection.parse_url(redis_url)
    proxy = TcpCut((target.get("host", "127.0.0.1"), int(target.get("port", 6379))))
    proxy.restore()
    key = f"lt-cut-{uuid.uuid4().hex[:12]}-key"
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", f"cut-{uuid.uuid4().hex[:10]}", key)
    with FakeUpstream() as upstream:
        config = write_config(
            tmp_path / "lantern.yaml",
            tmp_path,
            models_for(upstream)[:1],
            redis_url=f"redis://127.0.0.1:{proxy.port}/{target.get('db', 0)}",
        )
        running = start_gateway(config)
        try:
            yield running, proxy, upstream, key
        finally:
            running.stop()
            proxy.cut()


def test_redis_down_is_a_503_and_the_response_survives(
    cut_gateway: tuple[RunningGateway, TcpCut, FakeUpstream, str],
) -> None:
    running, proxy, upstream, key = cut_gateway
    auth = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=running.url, headers=auth, timeout=30) as client:
        body = {"model": "gpt-4o-mini", "input": "hello words:2"}
        stored = client.post("/v1/responses", json=body)
        assert stored.status_code == 200, stored.text
        response_id = stored.json()["id"]
        num_sent = len(upstream.requests)
        proxy.cut()
        replies = [
            client.get(f"/v1/responses/{response_id}"),
            client.delete(f"/v1/responses/{response_id}"),
            client.post("/v1/responses", json={**body, "previous_response_id": response_id}),
        ]
        for reply in replies:
            assert (reply.status_code, reply.headers.get("retry-after")) == (503, "1"), reply.text
            assert reply.json() == {
                "error": {
                    "message": "the store of responses does not answer; nothing ran, retry shortly",
                    "type": "service_unavailable",
                    "param": None,
                    "code": "response_store_unavailable",
                }
            }
        assert len(upstream.requests) == num_sent  # the continuation reached no upstream
        proxy.restore()
        assert client.get(f"/v1/responses/{response_id}").json() == stored.json()
        assert client.delete(f"/v1/responses/{response_id}").status_code == 200
