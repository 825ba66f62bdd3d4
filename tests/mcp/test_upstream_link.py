"""One upstream server's connection is shared by every tenant granted it: a call that fails on
a connection already replaced (it was in flight when another call's fault dropped it) leaves
the new connection alone, so acme's late failure never tears down the connection globex's
calls are using. `UpstreamLink` with a connection fake that counts what it opens and closes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from gateway.mcp.errors import UpstreamFailed
from gateway.mcp.upstream import UpstreamLink
from gateway.mcp_settings import McpServerSettings


class Connections:
    """Each connection answers `which` with its number; `broken` fails at once; `late` fails
    once the test opens `gate`."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed: list[int] = []
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Client]:
        self.opened += 1
        number = self.opened
        try:
            yield cast(Client, _Client(self, number))
        finally:
            self.closed.append(number)


class _Client:
    def __init__(self, connections: Connections, number: int) -> None:
        self._connections = connections
        self._number = number

    async def call_tool(self, tool: str, arguments: dict[str, Any], meta: Any = None) -> Any:
        if tool == "late":
            self._connections.waiting.set()
            await self._connections.gate.wait()
            raise ConnectionResetError("the old connection broke")
        if tool == "broken":
            raise ConnectionResetError("broken")
        return CallToolResult(content=[TextContent(text=f"connection {self._number}")])


def test_a_late_failure_on_a_replaced_connection_leaves_the_new_one() -> None:
    connections = Connections()
    server = McpServerSettings(name="orders", url="http://127.0.0.1:1/mcp")
    link = UpstreamLink(server, connections.connect, logging.getLogger("test.mcp"))

    async def text(tool: str) -> str:
        result = await link.call(tool, {})
        content = result.content[0]
        assert isinstance(content, TextContent)
        return content.text

    async def main() -> None:
        late = asyncio.ensure_future(text("late"))  # acme's call, in flight on connection 1
        await connections.waiting.wait()
        with pytest.raises(UpstreamFailed):
            await text("broken")  # connection 1 is dropped
        await asyncio.sleep(0)
        assert await text("which") == "connection 2"  # globex's call opens connection 2
        connections.gate.set()
        with pytest.raises(UpstreamFailed):
            await late  # acme's call fails, on connection 1
        await asyncio.sleep(0)
        assert await text("which") == "connection 2"  # globex's connection is still there
        assert (connections.opened, connections.closed) == (2, [1])
        await link.aclose()
        assert connections.closed == [1, 2]

    asyncio.run(main())
