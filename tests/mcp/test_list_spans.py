"""MCP's `tools/list` is a span in the client's trace, named and attributed as MCP's conventions
name a server's span of a method (`tools/list`, `mcp.method.name`, `jsonrpc.request.id`,
`mcp.session.id`), with the tenant and how many tools it was shown; with telemetry off none
is made. The real app's `/mcp` door, over ASGI, two tenants."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import Tool
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.door import McpDoor
from gateway.mcp.server import build_server
from gateway.mcp.sessions import TenantSessionManager
from gateway.telemetry import Metrics, Telemetry
from policies.mcp import McpServerGrant
from policies.model import TenantPolicy
from tests.e2e.harness import write_policy
from tests.fakes.upstream import FakeUpstream
from tests.gateway.http.test_door_spans import KEYS, PARENT, TRACE_ID, TRACEPARENT, _settings
from tests.mcp.asgi_door import call_door
from tests.mcp.harness import INITIALIZE, RUN_PYTHON

ACCEPT = "application/json, text/event-stream"


def _result(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC reply, sent as JSON or as the message event of an SSE stream."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        return _sse_result(reply.content)
    body: dict[str, Any] = orjson.loads(reply.content)
    return body


def _sse_result(stream: bytes) -> dict[str, Any]:
    """The message event of an SSE stream (after its empty priming event)."""
    lines = stream.decode().splitlines()
    data = (line[5:].strip() for line in lines if line.startswith("data:"))
    body: dict[str, Any] = orjson.loads(next(d for d in data if d))
    return body


async def _list(client: httpx.AsyncClient, tenant: str, traced: bool) -> int:
    """A session opened and its tools listed; how many tools were listed."""
    headers = {"authorization": f"Bearer {KEYS[tenant]}", "accept": ACCEPT}
    opened = await client.post("/mcp", json=INITIALIZE, headers=headers)
    assert opened.status_code == 200, opened.text
    headers["mcp-session-id"] = session = opened.headers["mcp-session-id"]
    headers["mcp-protocol-version"] = INITIALIZE["params"]["protocolVersion"]  # type: ignore[index]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await client.post("/mcp", json=done, headers=headers)).status_code == 202
    if traced:
        headers["traceparent"] = TRACEPARENT
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    listed = await client.post("/mcp", json=listing, headers=headers)
    assert listed.status_code == 200, listed.text
    await client.delete("/mcp", headers=headers)
    assert session
    return len(_result(listed)["result"]["tools"])


async def _serve(tmp: Path, traced: bool) -> tuple[list[int], list[ReadableSpan], list[str]]:
    with FakeUpstream() as upstream:
        settings = _settings(tmp, upstream)
        write_policy(tmp / "policies", "acme", KEYS["acme"], tools=[RUN_PYTHON])
        app = create_app(settings)
        parts = app.state.components
        spans = InMemorySpanExporter()
        telemetry = parts.pipeline.s.telemetry
        if traced:
            telemetry.add_span_processor(SimpleSpanProcessor(spans))
        else:  # behind the app's back: a span made anyway would be seen
            telemetry.provider.add_span_processor(SimpleSpanProcessor(spans))
        await parts.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                counts = [await _list(client, "acme", True), await _list(client, "zeta", False)]
        finally:
            await parts.stop()
    finished = list(spans.get_finished_spans())
    return counts, [s for s in finished if s.name == "tools/list"], [s.name for s in finished]


def test_tools_list_is_a_server_span_in_the_client_trace(tmp_path: Path) -> None:
    counts, listed, _ = asyncio.run(_serve(tmp_path, traced=True))
    assert counts == [1, 0]  # acme is granted one tool, zeta none
    acme, zeta = listed
    assert (acme.kind, zeta.kind) == (SpanKind.SERVER, SpanKind.SERVER)
    assert acme.parent is not None
    parent = (format(acme.parent.trace_id, "032x"), format(acme.parent.span_id, "016x"))
    assert parent == (TRACE_ID, PARENT)
    assert zeta.parent is None  # no `traceparent`: a trace of its own
    for span, tenant, num_tools in ((acme, "acme", 1), (zeta, "zeta", 0)):
        attrs = dict(span.attributes or {})
        assert attrs.pop("mcp.session.id")  # the session the door opened
        assert attrs == {
            "mcp.method.name": "tools/list",
            "jsonrpc.request.id": "2",
            "lantern.mcp.num_tools": num_tools,
            "lantern.tenant": tenant,
            "lantern.door": "mcp",
            "lantern.status": "ok",
        }


def test_no_tools_list_span_with_telemetry_off(tmp_path: Path) -> None:
    counts, listed, names = asyncio.run(_serve(tmp_path, traced=False))
    assert counts == [1, 0]
    assert (listed, names) == ([], [])


class BrokenUpstreams:
    """An upstream table that fails when asked (the catalogue's own failure path)."""

    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        raise RuntimeError(f"the table of {server!r} is broken")


class GrantingKeys:
    """acme's key, its policy granting the `orders` server."""

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        grant = McpServerGrant(name="orders")
        return (TenantPolicy(tenant="acme", mcp_servers=(grant,)), "k1") if key == "acme" else None


def test_a_failed_listing_is_a_span_with_its_error_type() -> None:
    """The catalogue raised: the client gets the SDK's JSON-RPC error, the span `error`."""
    telemetry = Telemetry(TracerProvider(), Metrics())
    spans = InMemorySpanExporter()
    telemetry.add_span_processor(SimpleSpanProcessor(spans))
    log = logging.getLogger("test.mcp")
    catalogue = ToolCatalogue(BrokenUpstreams(), log)
    server = build_server(catalogue, cast(Any, None), cast(Any, None), cast(Any, None), telemetry)
    sessions = TenantSessionManager(
        server,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=60.0,
        max_sessions=10,
        max_sessions_per_tenant=10,
    )
    door = McpDoor(sessions, GrantingKeys(), (), telemetry)
    listing = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}

    async def main() -> dict[str, Any]:
        async with sessions.run():
            status, headers, _ = await call_door(door, "acme", body=INITIALIZE)
            assert status == 200
            version = INITIALIZE["params"]["protocolVersion"]  # type: ignore[index]
            named = {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": version}
            assert (await call_door(door, "acme", body=done, headers=named))[0] == 202
            traced = {**named, "traceparent": TRACEPARENT}
            status, _, body = await call_door(door, "acme", body=listing, headers=traced)
        assert status == 200
        return _sse_result(body)

    reply = asyncio.run(main())
    assert reply["id"] == 9 and "error" in reply and "result" not in reply
    opened, span = spans.get_finished_spans()  # initialize's span, then the listing's
    assert opened.name == "initialize"
    assert (span.name, span.kind) == ("tools/list", SpanKind.SERVER)
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT
    assert span.status.status_code is StatusCode.ERROR
    attrs = dict(span.attributes or {})
    assert attrs.pop("mcp.session.id")  # the session initialize opened
    assert attrs == {
        "mcp.method.name": "tools/list",
        "jsonrpc.request.id": "9",
        "lantern.tenant": "acme",
        "lantern.door": "mcp",
        "lantern.status": "error",
        "error.type": "RuntimeError",
    }
