"""A `tools/call` whose client leaves while the upstream server runs the tool still writes the
call's ledger row (`client_disconnect`), as the model doors do: the tool may have run, and a
tenant that hangs up mid-call must not leave its calls out of the ledger; its neighbour's call,
which finished, has its `ok` row."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, cast

from mcp_types import CallToolResult, TextContent, Tool
from opentelemetry.sdk.trace import TracerProvider

from gateway.mcp.accounting import ToolCallLedger
from gateway.mcp.calls import McpCaller, ToolCalls
from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.limits import ToolCallLimiter
from gateway.ports import CallRecord
from gateway.telemetry import Metrics, Telemetry
from policies.mcp import McpServerGrant
from policies.model import TenantPolicy
from quotas.memory import MemoryQuotaStore


class Orders:
    """The `orders` server: lists one tool; acme's call of it never returns, globex's does."""

    def __init__(self) -> None:
        self.running = asyncio.Event()

    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        return (
            (Tool(name="lookup", input_schema={"type": "object"}),) if server == "orders" else None
        )

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], context: object
    ) -> CallToolResult:
        if arguments.get("hang"):
            self.running.set()
            await asyncio.Event().wait()
        return CallToolResult(content=[TextContent(text="shipped")])


class Rows:
    def __init__(self) -> None:
        self.rows: list[CallRecord] = []

    def record(self, row: CallRecord) -> None:
        self.rows.append(row)


def _caller(tenant: str) -> McpCaller:
    policy = TenantPolicy(tenant=tenant, mcp_servers=(McpServerGrant(name="orders"),))
    return McpCaller(policy, "k1", "s-1", f"{tenant}-run")


def test_a_call_whose_client_left_has_its_row() -> None:
    orders, rows = Orders(), Rows()
    catalogue = ToolCatalogue(orders, logging.getLogger("test.mcp"))
    calls = ToolCalls(
        catalogue,
        cast(Any, None),  # no sandboxed tool is called
        cast(Any, orders),
        ToolCallLimiter(MemoryQuotaStore(), time.time),
        ToolCallLedger(rows, time.monotonic),
        Telemetry(TracerProvider(), Metrics()),
    )

    async def main() -> None:
        hanging = asyncio.ensure_future(
            calls.call(_caller("acme"), 1, "orders__lookup", {"hang": True})
        )
        await orders.running.wait()
        done = await calls.call(_caller("globex"), 1, "orders__lookup", {})
        assert done.content == [TextContent(text="shipped")]
        hanging.cancel()  # the client went away
        await asyncio.gather(hanging, return_exceptions=True)
        assert hanging.cancelled()

    asyncio.run(main())
    found = [
        (r.tenant, r.session_id, r.model, r.backend, r.status, r.error_kind) for r in rows.rows
    ]
    assert found == [
        ("globex", "globex-run", "orders__lookup", "orders", "ok", None),
        ("acme", "acme-run", "orders__lookup", "orders", "client_disconnect", None),
    ]
    assert all(r.door == "mcp" and r.cost_usd == 0.0 for r in rows.rows)
