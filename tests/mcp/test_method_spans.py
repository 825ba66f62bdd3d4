"""MCP's `initialize`, `ping` and `subscriptions/listen` are spans in the client's trace, named
and attributed as MCP's conventions name a server's span of a method (`mcp.method.name`,
`jsonrpc.request.id`, `mcp.session.id`) with the tenant; a refused listen carries its JSON-RPC
error code, one whose client left ends `cancelled`; with telemetry off none is made. The real
door and the SDK's session manager, over ASGI, two tenants."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.mcp.door import McpDoor
from gateway.mcp.listen import TenantListens
from gateway.mcp.server import build_server
from gateway.mcp.sessions import TenantSessionManager
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from tests.gateway.http.test_door_spans import PARENT, TRACEPARENT
from tests.mcp.asgi_door import Keys, call_door
from tests.mcp.harness import INITIALIZE

HANDSHAKE = str(INITIALIZE["params"]["protocolVersion"])  # type: ignore[index]
MODERN = "2026-07-28"


class Catalogue:
    async def digest(self, policy: TenantPolicy) -> str:
        return "d0"


def _listen(request_id: int) -> dict[str, Any]:
    meta = {
        PROTOCOL_VERSION_META_KEY: MODERN,
        CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
        CLIENT_CAPABILITIES_META_KEY: {},
    }
    params = {"notifications": {"toolsListChanged": True}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}


def _door(telemetry: Telemetry, listens_per_tenant: int) -> tuple[TenantSessionManager, McpDoor]:
    listens = TenantListens(cast(Any, Catalogue()), listens_per_tenant, 10)
    server = build_server(cast(Any, None), cast(Any, None), cast(Any, None), listens, telemetry)
    sessions = TenantSessionManager(
        server,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=60.0,
        max_sessions=10,
        max_sessions_per_tenant=10,
    )
    return sessions, McpDoor(sessions, Keys(), (), telemetry)


async def _handshake_and_ping(door: McpDoor, key: str, traced: bool) -> str:
    """A session opened (with the client's `traceparent` when `traced`) and pinged; its id."""
    trace = {"traceparent": TRACEPARENT} if traced else {}
    status, headers, _ = await call_door(door, key, body=INITIALIZE, headers=trace)
    assert status == 200
    session = headers["mcp-session-id"]
    named = {"mcp-session-id": session, "mcp-protocol-version": HANDSHAKE}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await call_door(door, key, body=done, headers=named))[0] == 202
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert (await call_door(door, key, body=ping, headers={**named, **trace}))[0] == 200
    return session


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _traced() -> tuple[Telemetry, InMemorySpanExporter]:
    telemetry = Telemetry(TracerProvider(), Metrics())
    spans = InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(spans))
    return telemetry, spans


def test_initialize_and_ping_are_server_spans_of_their_session() -> None:
    telemetry, spans = _traced()
    sessions, door = _door(telemetry, 1)

    async def main() -> tuple[str, str]:
        async with sessions.run():
            acme = await _handshake_and_ping(door, "acme-key", traced=True)
            globex = await _handshake_and_ping(door, "globex-key", traced=False)
        return acme, globex

    acme, globex = asyncio.run(main())
    found = [(s.name, _attrs(s)["lantern.tenant"]) for s in spans.get_finished_spans()]
    assert found == [
        ("initialize", "acme"),
        ("ping", "acme"),
        ("initialize", "globex"),
        ("ping", "globex"),
    ]
    for span, session, request_id in zip(
        spans.get_finished_spans(), (acme, acme, globex, globex), ("1", "2", "1", "2"), strict=True
    ):
        assert span.kind is SpanKind.SERVER
        assert _attrs(span) == {
            "mcp.method.name": span.name,
            "jsonrpc.request.id": request_id,
            "mcp.session.id": session,
            "lantern.tenant": _attrs(span)["lantern.tenant"],
            "lantern.door": "mcp",
            "lantern.status": "ok",
        }
    parents = [s.parent.span_id if s.parent else None for s in spans.get_finished_spans()]
    assert parents == [int(PARENT, 16), int(PARENT, 16), None, None]


async def _wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


def test_a_listen_stream_is_a_span_ended_when_its_client_leaves_or_it_is_refused() -> None:
    telemetry, spans = _traced()
    sessions, door = _door(telemetry, 1)
    modern = {
        "mcp-protocol-version": MODERN,
        "mcp-method": "subscriptions/listen",
        "traceparent": TRACEPARENT,
    }

    async def main() -> None:
        async with sessions.run():
            # read until the acknowledgement, then the client goes away
            status, _, _ = await call_door(
                door,
                "acme-key",
                body=_listen(7),
                headers=modern,
                enough=lambda b: b"acknowledged" in b,
            )
            assert status == 200
            await _wait_for(lambda: len(spans.get_finished_spans()) == 1)
        refused = TenantListens(cast(Any, Catalogue()), 0, 10)  # no stream fits
        server = build_server(cast(Any, None), cast(Any, None), cast(Any, None), refused, telemetry)
        closed = TenantSessionManager(server, max_sessions=10, max_sessions_per_tenant=10)
        async with closed.run():
            gate = McpDoor(closed, Keys(), (), telemetry)
            status, _, body = await call_door(gate, "globex-key", body=_listen(8), headers=modern)
            assert status == 200 and b"listen streams" in body

    asyncio.run(main())
    left, refused = spans.get_finished_spans()
    assert (left.name, refused.name) == ("subscriptions/listen", "subscriptions/listen")
    assert _attrs(left) == {
        "mcp.method.name": "subscriptions/listen",
        "jsonrpc.request.id": "7",
        "lantern.tenant": "acme",
        "lantern.door": "mcp",
        "lantern.status": "cancelled",
    }
    assert left.status.status_code is StatusCode.UNSET
    assert [s.parent.span_id if s.parent else None for s in (left, refused)] == [
        int(PARENT, 16)
    ] * 2
    assert _attrs(refused) == {
        "mcp.method.name": "subscriptions/listen",
        "jsonrpc.request.id": "8",
        "lantern.tenant": "globex",
        "lantern.door": "mcp",
        "lantern.status": "error",
        "error.type": "-32603",
    }
    assert refused.status.status_code is StatusCode.ERROR


def test_no_method_span_with_telemetry_off() -> None:
    telemetry = Telemetry(TracerProvider(), Metrics())
    spans = InMemorySpanExporter()
    telemetry.provider.add_span_processor(SimpleSpanProcessor(spans))  # behind the app's back
    sessions, door = _door(telemetry, 1)

    async def main() -> None:
        async with sessions.run():
            await _handshake_and_ping(door, "acme-key", traced=True)

    asyncio.run(main())
    assert [s.name for s in spans.get_finished_spans()] == []
