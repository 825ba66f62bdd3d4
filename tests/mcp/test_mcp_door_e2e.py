"""The issue's check from outside: the official `mcp` client over Streamable HTTP against a real
`lantern serve`, with an upstream MCP server (the SDK's own) in its own process."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.e2e.harness import write_policy
from tests.mcp.clients import mcp_client
from tests.mcp.harness import ACME_KEY, GLOBEX_KEY, RUN_PYTHON, lantern_serve, upstream_server

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def mcp_rows(db: Path, expected: int) -> list[tuple[str, str, str, str, str | None, str]]:
    """The ledger's MCP rows once `expected` have arrived (the writer lingers 0.5 s)."""
    deadline = time.monotonic() + 15
    while True:
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT tenant, model, backend, status, error_kind, kind FROM usage "
                "WHERE door = 'mcp' ORDER BY ts"
            ).fetchall()
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_tools_of_a_tenant_through_mcp(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(
        tmp_path / "policies", "acme", ACME_KEY, tools=[RUN_PYTHON], mcp_servers=["orders"]
    )
    write_policy(tmp_path / "policies", "globex", GLOBEX_KEY)
    with upstream_server(tmp_path, "orders") as orders:
        servers = [{"name": "orders", "url": orders.url, "timeout_s": 10}]
        with lantern_serve(tmp_path, mcp_servers=servers) as gw:
            asyncio.run(_check(gw.mcp_url, gw.port))
            for key in ("lt-wrong-key", None):
                headers = {"authorization": f"Bearer {key}"} if key else {}
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                assert httpx.post(gw.mcp_url, json=body, headers=headers).status_code == 401
            rows = mcp_rows(tmp_path / "lantern.db", 6)
        seen = orders.requests_seen()
    assert seen and all(ACME_KEY not in value for r in seen for value in r.values())
    assert not any("authorization" in r for r in seen)
    calls = [r[:5] for r in rows if r[5] == "tool_call"]
    assert [r for r in calls if r[0] == "acme"] == [  # one row per call, in call order
        ("acme", "run_python", "sandbox", "ok", None),
        ("acme", "run_python", "sandbox", "ok", "tool_error"),
        ("acme", "orders__lookup_order", "orders", "ok", None),
    ]
    assert [r for r in calls if r[0] == "globex"] == [
        ("globex", "run_python", "sandbox", "rejected", "unknown_tool")
    ]
    # and one billed row per sandboxed run that ran (the refused call ran nothing)
    runs = [r[:5] for r in rows if r[5] == "tool_run"]
    assert sorted(runs) == [
        ("acme", "run_python", "sandbox:local", "error", "failed"),
        ("acme", "run_python", "sandbox:local", "ok", None),
    ]


async def _check(url: str, port: int) -> None:
    async with mcp_client(url, ACME_KEY, mode="legacy") as acme:
        listed = (await acme.list_tools()).tools
        assert [t.name for t in listed] == [
            "run_python",
            "orders__lookup_order",
            "orders__cancel_order",
        ]
        assert listed[0].input_schema["properties"]["code"] == {
            "type": "string",
            "description": "the program",
        }
        assert listed[0].input_schema["required"] == ["code"]
        answer = await acme.call_tool("run_python", {"code": "print(6*7)"})
        assert (answer.is_error, answer.content[0].text) == (False, "42\n")
        dial = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)"
        refused = await acme.call_tool("run_python", {"code": dial})
        assert refused.is_error and "ConnectionRefusedError" in refused.content[0].text
        order = await acme.call_tool("orders__lookup_order", {"order_id": "A-17"})
        assert (order.is_error, order.content[0].text) == (False, "order A-17: shipped, 2 items")
    async with mcp_client(url, ACME_KEY, mode="legacy") as again:
        relisted = (await again.list_tools()).tools
    assert [t.model_dump_json() for t in relisted] == [t.model_dump_json() for t in listed]
    # the SDK's default wire (2026-07-28, no session): the same tools; each wire its own bytes
    async with mcp_client(url, ACME_KEY) as modern, mcp_client(url, ACME_KEY) as modern_too:
        first, second = (await modern.list_tools()).tools, (await modern_too.list_tools()).tools
    assert [t.model_dump_json() for t in first] == [t.model_dump_json() for t in second]
    assert [t.model_dump() for t in first] == [t.model_dump() for t in listed]
    async with mcp_client(url, GLOBEX_KEY) as globex:
        assert (await globex.list_tools()).tools == []
        with pytest.raises(MCPError) as refused_call:
            await globex.call_tool("run_python", {"code": "print(1)"})
        assert refused_call.value.code == INVALID_PARAMS
