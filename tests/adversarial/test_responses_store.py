"""The Responses door when its store misbehaves, through a real gateway: Redis cut under the
shared store is a 503 the client can retry (never a 500, `input_items` too), nothing reserved or sent upstream, and
the stored response is there again once Redis is back; a slow store still has a streamed
response by the time the client reads `response.completed`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from gateway.responses.store import PutOutcome, ResponseStore, StoredResponse
from gateway.settings import load_settings
from gateway.wiring import build_components
from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.tcp_cut import TcpCut
from tests.fakes.upstream import FakeUpstream

KEY = "lt-acme-secret-key-0001"


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


@pytest.mark.redis
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
            client.get(f"/v1/responses/{response_id}/input_items"),
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
        listed = client.get(f"/v1/responses/{response_id}/input_items").json()
        assert [item["content"] for item in listed["data"]] == [
            [{"type": "input_text", "text": "hello words:2"}]
        ]
        assert client.delete(f"/v1/responses/{response_id}").status_code == 200


class SlowStore:
    """The process's store, a Redis round trip slower on every write (as a busy Redis is)."""

    def __init__(self, inner: ResponseStore) -> None:
        self.inner = inner

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        await asyncio.sleep(0.2)
        return await self.inner.put(tenant, response_id, data)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return await self.inner.get(tenant, response_id)

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        return await self.inner.get_bytes(tenant, response_id)

    async def get_reply(self, tenant: str, response_id: str) -> bytes | None:
        return await self.inner.get_reply(tenant, response_id)

    async def delete(self, tenant: str, response_id: str) -> bool:
        return await self.inner.delete(tenant, response_id)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def slow_gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    with FakeUpstream() as upstream:
        settings = load_settings(
            write_config(tmp_path / "lantern.yaml", tmp_path, models_for(upstream)[:1])
        )
        parts = build_components(settings)
        parts.response_store = SlowStore(parts.response_store)
        running = RunningGateway(settings, components=parts).start()
        try:
            yield running
        finally:
            running.stop()


def test_a_streamed_response_is_stored_before_the_client_reads_it_completed(
    slow_gateway: RunningGateway,
) -> None:
    """A client that stops reading at `response.completed` and hangs up (the event carries
    everything it needs) continues from that response at once."""
    auth = {"authorization": f"Bearer {KEY}"}
    body = {"model": "gpt-4o-mini", "input": "hi words:3", "stream": True}
    with httpx.Client(base_url=slow_gateway.url, headers=auth, timeout=30) as client:
        with client.stream("POST", "/v1/responses", json=body) as events:
            assert events.status_code == 200
            lines = events.iter_lines()
            for line in lines:
                if line == "event: response.completed":
                    break
            else:
                raise AssertionError("no response.completed event")
            completed = orjson.loads(next(lines).removeprefix("data: "))
        # the connection is closed here, the rest of the body unread
        response_id = completed["response"]["id"]
    with httpx.Client(base_url=slow_gateway.url, headers=auth, timeout=30) as client:
        found = client.get(f"/v1/responses/{response_id}")
        assert found.status_code == 200, found.text
        assert found.json() == completed["response"]
        more = {"model": "gpt-4o-mini", "input": "more words:2"}
        chained = client.post("/v1/responses", json={**more, "previous_response_id": response_id})
        assert chained.status_code == 200, chained.text


class DeleteFirstStore(SlowStore):
    """The process's store, whose writes wait until the client's DELETE of the same id has
    been served (a stream still running when its client deletes it)."""

    def __init__(self, inner: ResponseStore) -> None:
        super().__init__(inner)
        self.deletes: list[str] = []

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        for _ in range(200):  # at most 10 s: a store that never hears the DELETE still writes
            if response_id in self.deletes:
                break
            await asyncio.sleep(0.05)
        return await self.inner.put(tenant, response_id, data)

    async def delete(self, tenant: str, response_id: str) -> bool:
        deleted = await self.inner.delete(tenant, response_id)
        self.deletes.append(response_id)
        return deleted


def test_a_response_deleted_while_it_streams_stays_deleted(tmp_path: Path) -> None:
    """The client reads the id from `response.created` and deletes it while the model still
    answers: nothing is stored yet (404), and the response the stream then finishes is not
    stored either, so no `GET` or continuation finds what the client deleted."""
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    auth = {"authorization": f"Bearer {KEY}"}
    body = {"model": "gpt-4o-mini", "input": "hi words:3", "stream": True}
    with FakeUpstream() as upstream:
        upstream.app.chunk_delay_s = 0.05  # `response.created` reaches the client first
        settings = load_settings(
            write_config(tmp_path / "lantern.yaml", tmp_path, models_for(upstream)[:1])
        )
        parts = build_components(settings)
        parts.response_store = DeleteFirstStore(parts.response_store)
        running = RunningGateway(settings, components=parts).start()
        try:
            with httpx.Client(base_url=running.url, headers=auth, timeout=30) as client:
                with client.stream("POST", "/v1/responses", json=body) as events:
                    lines = events.iter_lines()
                    assert next(lines) == "event: response.created"
                    created = orjson.loads(next(lines).removeprefix("data: "))
                    response_id = created["response"]["id"]
                    deleted = client.delete(f"/v1/responses/{response_id}")
                    assert deleted.status_code == 404, deleted.text  # not stored yet
                    assert "event: response.completed" in list(lines)
                assert client.get(f"/v1/responses/{response_id}").status_code == 404
                more = {
                    "model": "gpt-4o-mini",
                    "input": "more",
                    "previous_response_id": response_id,
                }
                assert client.post("/v1/responses", json=more).status_code == 404
        finally:
            running.stop()
