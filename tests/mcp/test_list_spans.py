"""MCP's `tools/list` is a span in the client's trace, named and attributed as MCP's conventions
name a server's span of a method (`tools/list`, `mcp.method.name`, `jsonrpc.request.id`,
`mcp.session.id`), with the tenant and how many tools it was shown; with telemetry off none
is made. The real app's `/mcp` door, over ASGI, two tenants."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.app import create_app
from tests.e2e.harness import write_policy
from tests.fakes.upstream import FakeUpstream
from tests.gateway.http.test_door_spans import KEYS, PARENT, TRACE_ID, TRACEPARENT, _settings
from tests.mcp.harness import INITIALIZE, RUN_PYTHON

ACCEPT = "application/json, text/event-stream"


def _result(reply: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC reply, sent as JSON or as the message event of an SSE stream (after its
    empty priming event)."""
    text = reply.text
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        data = (line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
        text = next(d for d in data if d)
    body: dict[str, Any] = orjson.loads(text)
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
