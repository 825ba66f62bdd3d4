"""Tool runs and MCP tool calls in the client's trace: `lantern serve` with the OTLP exporter
pointed at an in-process collector, a tool run over `POST /v1/tools/runs` and an MCP call to
an upstream server's tool, each with its own `traceparent`. Each is an `execute_tool` span
that descends from the client's span (the MCP client's `tools/list` is a `tools/list` span
there too); the upstream MCP server receives the context of the gateway's client span in its
`traceparent` header."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from tests.e2e.harness import write_policy
from tests.e2e.test_traces_e2e import CLIENT, GEN_AI_NAMES, SERVER, _of, _traceparent
from tests.fakes.otlp_collector import CollectedSpan, OTLPCollector
from tests.mcp.clients import mcp_client
from tests.mcp.harness import ACME_KEY, RUN_PYTHON, lantern_serve, upstream_server

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_a_tool_run_and_an_mcp_tool_call_are_spans_in_the_client_trace(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(
        tmp_path / "policies", "acme", ACME_KEY, tools=[RUN_PYTHON], mcp_servers=["orders"]
    )
    run_trace, run_parent, run_tp = _traceparent(0xC3)
    mcp_trace, mcp_parent, mcp_tp = _traceparent(0xD4)
    with upstream_server(tmp_path, "orders") as orders, OTLPCollector() as collector:
        servers = [{"name": "orders", "url": orders.url, "timeout_s": 10}]
        telemetry = {"exporter": "otlp", "otlp_endpoint": collector.endpoint}
        with lantern_serve(tmp_path, mcp_servers=servers, telemetry=telemetry) as gw:
            run = httpx.post(
                gw.url + "/v1/tools/runs",
                json={
                    "tool": "run_python",
                    "arguments": {"code": "print(6*7)"},
                    "tool_call_id": "call_7",
                },
                headers={
                    "authorization": f"Bearer {ACME_KEY}",
                    "traceparent": run_tp,
                    "x-session-id": "agent-9",
                },
                timeout=60,
            )
            assert (run.status_code, run.json()["stdout"]) == (200, "42\n")
            asyncio.run(_call_orders(gw.mcp_url, mcp_tp))
            # the run; the MCP client's `tools/list` (it lists before it calls) and its call
            spans = collector.wait_for(4)
        seen = orders.requests_seen()

    tool_run = _of(spans, run_trace, SERVER)
    assert tool_run.name == "execute_tool run_python"
    assert tool_run.parent_span_id == run_parent
    assert _attrs(tool_run) == {
        ga.GEN_AI_OPERATION_NAME: "execute_tool",
        ga.GEN_AI_TOOL_NAME: "run_python",
        ga.GEN_AI_TOOL_CALL_ID: "call_7",
        ga.GEN_AI_CONVERSATION_ID: "agent-9",
        "lantern.tenant": "acme",
        "lantern.door": "tools",
        "lantern.status": "succeeded",
    }

    listed = [s for s in spans if s.trace_id == mcp_trace and s.name == "tools/list"]
    assert listed and all(s.kind == SERVER and s.parent_span_id == mcp_parent for s in listed)
    assert {(s.attributes["mcp.method.name"], s.attributes["lantern.tenant"]) for s in listed} == {
        ("tools/list", "acme")
    }
    calls = [s for s in spans if s.trace_id == mcp_trace and s.name != "tools/list"]
    served, upstream = _of(calls, mcp_trace, SERVER), _of(calls, mcp_trace, CLIENT)
    assert served.name == "execute_tool orders__lookup_order"
    assert served.parent_span_id == mcp_parent
    assert upstream.name == "tools/call lookup_order"
    assert upstream.parent_span_id == served.span_id
    assert _attrs(served) == {
        ga.GEN_AI_OPERATION_NAME: "execute_tool",
        ga.GEN_AI_TOOL_NAME: "orders__lookup_order",
        "lantern.tenant": "acme",
        "lantern.door": "mcp",
        "lantern.status": "ok",
        "lantern.mcp.server": "orders",
        "mcp.method.name": "tools/call",
    }
    assert upstream.attributes[ga.GEN_AI_TOOL_NAME] == "lookup_order"
    # the upstream server joined the trace: its tools/call carried the client span's context
    calls = [r for r in seen if "traceparent" in r]
    assert [r["traceparent"] for r in calls] == [f"00-{mcp_trace}-{upstream.span_id}-01"]
    for span in (tool_run, served, upstream):
        assert {k for k in span.attributes if k.startswith("gen_ai.")} <= GEN_AI_NAMES
        assert not any("6*7" in str(v) or "A-17" in str(v) for v in span.attributes.values())


def _attrs(span: CollectedSpan) -> dict[str, object]:
    """The span's attributes less the ids that vary (run id, replayed, JSON-RPC id)."""
    varying = {"lantern.tool.run_id", "lantern.tool.replayed", "jsonrpc.request.id"}
    return {k: v for k, v in span.attributes.items() if k not in varying}


async def _call_orders(url: str, traceparent: str) -> None:
    async with mcp_client(url, ACME_KEY, headers={"traceparent": traceparent}) as client:
        answer = await client.call_tool("orders__lookup_order", {"order_id": "A-17"})
        assert answer.content[0].text == "order A-17: shipped, 2 items"  # type: ignore[union-attr]
