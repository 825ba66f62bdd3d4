"""A streamed Responses call is stored even when its client hangs up while the store write is
under way: the client was billed and holds the id from `response.created`, so a continuation
of it must find it. The real app and settings over raw ASGI, the wire-level fake upstream, and
a store whose put waits until the test lets it go."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import orjson
import yaml

from adapters.sse import SSEParser
from gateway.app import create_app
from gateway.responses.store import PutOutcome, ResponseStore, StoredResponse
from gateway.settings import load_settings
from gateway.wiring import build_components
from tests.fakes.upstream import FakeUpstream
from tests.gateway.http.raw_asgi import http_scope

KEY = "sk-resp-store-write-0000000000000001"
MODEL = "gpt-fake"


class HeldStore:
    """The process's store; each put waits for `release` once it has started."""

    def __init__(self, inner: ResponseStore) -> None:
        self.inner = inner
        self.put_started = asyncio.Event()
        self.release = asyncio.Event()
        self.stored: list[str] = []

    async def put(self, tenant: str, response_id: str, data: bytes) -> PutOutcome:
        self.put_started.set()
        await self.release.wait()
        outcome = await self.inner.put(tenant, response_id, data)
        self.stored.append(response_id)
        return outcome

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


def _settings(tmp: Path, upstream: FakeUpstream) -> Any:
    (tmp / "policies").mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    policy = {"tenant": "acme", "api_keys": [{"id": "k1", "sha256": digest}]}
    (tmp / "policies" / "acme.yaml").write_text(yaml.safe_dump(policy))
    backend = {
        "kind": "openai_compatible",
        "name": "fake",
        "base_url": upstream.openai_base_url,
        "model": "fake-1",
    }
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "store-write",
        "fleet": {"signal_interval_s": 0, "health_interval_s": 3600},
        "models": [{"name": MODEL, "backends": [backend]}],
        "prices": {MODEL: {"input": 1.0, "output": 2.0}},
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


def _scope(method: str, path: str, body: bytes) -> dict[str, Any]:
    return http_scope(method, path, KEY, body)


async def _hang_up_mid_put(tmp: Path) -> tuple[list[str], list[str], int, dict[str, Any]]:
    """The events the client got before it left, the ids stored, and `GET` of the response
    once the put was let go: its status and body."""
    with FakeUpstream() as upstream:
        upstream.app.chunk_delay_s = 0.02  # the client reads `response.created` first
        settings = _settings(tmp, upstream)
        parts = build_components(settings)
        store = HeldStore(parts.response_store)
        parts.response_store = store
        app = create_app(settings, parts)
        await parts.start()
        try:
            return await _drive(app, store)
        finally:
            await parts.stop()


async def _leave_mid_put(app: Any, store: HeldStore) -> tuple[list[str], dict[str, Any]]:
    """A streamed call whose client hangs up while its turn is being stored: the events it got
    and the response `response.created` named."""
    raw = orjson.dumps({"model": MODEL, "input": "hello there", "stream": True})
    gone = asyncio.Event()
    parser = SSEParser()
    events: list[str] = []
    created: dict[str, Any] = {}
    is_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal is_sent
        if not is_sent:
            is_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        for event in parser.feed(message.get("body", b"")):
            events.append(event.event or "")
            if event.event == "response.created":
                created.update(orjson.loads(event.data)["response"])

    call = asyncio.create_task(app(_scope("POST", "/v1/responses", raw), receive, send))
    await asyncio.wait_for(store.put_started.wait(), 10)
    gone.set()  # the client hangs up while its turn is being stored
    await asyncio.wait_for(call, 10)
    return events, created


async def _drive(app: Any, store: HeldStore) -> tuple[list[str], list[str], int, dict[str, Any]]:
    events, created = await _leave_mid_put(app, store)
    store.release.set()
    for _ in range(100):  # the write, left running, finishes in a few loop turns
        if store.stored:
            break
        await asyncio.sleep(0)
    reply: dict[str, Any] = {}

    async def got(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            reply["status"] = message["status"]
        elif message.get("body"):
            reply["body"] = orjson.loads(message["body"])

    async def no_body() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    await app(_scope("GET", f"/v1/responses/{created['id']}", b""), no_body, got)
    return events, store.stored, reply["status"], {**reply["body"], "created_id": created["id"]}


def test_a_client_hanging_up_while_its_turn_is_stored_does_not_cancel_the_write(
    tmp_path: Path,
) -> None:
    events, stored, status, body = asyncio.run(_hang_up_mid_put(tmp_path))
    assert events[0] == "response.created"
    assert "response.completed" not in events  # it left before the event that completes it
    assert stored == [body["created_id"]]
    assert (status, body["id"], body["status"]) == (200, body["created_id"], "completed")


async def _stop_mid_put(tmp: Path) -> tuple[list[str], list[str], str]:
    """The app under its ASGI lifespan: a client hangs up while its turn is stored, the gateway
    is told to stop, and the held put is let go only once the shutdown has begun. Returns what
    happened in order (the put done, the components stopping), what the lifespan said, and the
    response's id."""
    with FakeUpstream() as upstream:
        upstream.app.chunk_delay_s = 0.02
        settings = _settings(tmp, upstream)
        parts = build_components(settings)
        store = HeldStore(parts.response_store)
        parts.response_store = store
        app = create_app(settings, parts)
        order = store.stored
        stop_parts = parts.stop

        async def stop() -> None:
            order.append("stopping")
            await stop_parts()

        parts.stop = stop  # type: ignore[method-assign]
        said: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        heard: list[str] = []

        async def send(message: dict[str, Any]) -> None:
            heard.append(message["type"])

        said.put_nowait({"type": "lifespan.startup"})
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        life = asyncio.create_task(app(scope, said.get, send))
        while "lifespan.startup.complete" not in heard:
            await asyncio.sleep(0.01)
        _, created = await _leave_mid_put(app, store)
        said.put_nowait({"type": "lifespan.shutdown"})
        await asyncio.sleep(0.2)  # the shutdown is under way, waiting on the write
        store.release.set()
        await asyncio.wait_for(life, 20)
        return order, heard, created["id"]


def test_a_stopping_gateway_finishes_the_turn_a_gone_client_was_billed_for(
    tmp_path: Path,
) -> None:
    """The stores close only after the write (without the wait, they stop first and the
    write is cut by the loop's end)."""
    order, heard, created_id = asyncio.run(_stop_mid_put(tmp_path))
    assert heard[-1] == "lifespan.shutdown.complete"
    assert order == [created_id, "stopping"]
