"""An upstream MCP server made with the official SDK (`MCPServer`), run as its own process:
`python -m tests.mcp.orders_server PORT HEADERS_LOG [ok|slow|garbage]`.

It offers `lookup_order` and appends the headers of every HTTP request it receives to
HEADERS_LOG (one JSON object a line), so a test can show what reached it. `slow`: the tool
sleeps 30 s; `garbage`: it lists its tools, and answers every tool call (the 2026 wire names
the method in a header) with 200 and bytes that are not MCP.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send


def orders_app(mode: str) -> ASGIApp:
    server = MCPServer("orders")

    @server.tool(description="Look up an order by its id.")
    async def lookup_order(order_id: str) -> str:
        if mode == "slow":
            await asyncio.sleep(30)
        return f"order {order_id}: shipped, 2 items"

    @server.tool(description="Cancel an order.")
    async def cancel_order(order_id: str) -> str:
        return f"order {order_id}: cancelled"

    return server.streamable_http_app()


async def garbage(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"<html>not MCP</html>"})


def recording(app: ASGIApp, log: Path, mode: str) -> ASGIApp:
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            with log.open("ab") as out:
                out.write(orjson.dumps(seen) + b"\n")
            if mode == "garbage" and seen.get("mcp-method") == "tools/call":
                await garbage(scope, receive, send)
                return
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    port, log = int(sys.argv[1]), Path(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "ok"
    app = recording(orders_app(mode), log, mode)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
