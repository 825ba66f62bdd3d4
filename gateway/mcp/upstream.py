"""The upstream MCP servers of lantern.yaml: one long-lived client connection each, made with
Lantern's own credentials (never the tenant's), their tool lists, and calls bounded by each
server's `timeout_s`. A fault of one server is that server's alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, PARSE_ERROR, CallToolResult, RequestParamsMeta, Tool
from pydantic import ValidationError

from gateway.mcp.errors import UpstreamFailed, UpstreamFault
from gateway.mcp_settings import McpServerSettings

Connect = Callable[[], AbstractAsyncContextManager[Client]]
# errors the SDK's client makes up itself when the connection breaks or a reply is not MCP
_CLIENT_FAULTS: dict[int, UpstreamFault] = {
    CONNECTION_CLOSED: "unreachable",
    PARSE_ERROR: "invalid_reply",
}


@asynccontextmanager
async def open_client(server: McpServerSettings, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An MCP client session to `server` carrying only `headers` (the operator's)."""
    timeout = httpx2.Timeout(server.timeout_s, read=max(server.timeout_s, 300.0))
    hooks = {"request": [lift_trace_context]}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http,
        Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
    ):
        yield client


async def lift_trace_context(request: httpx2.Request) -> None:
    """The W3C context a message carries in `params._meta` (MCP's trace conventions) also in
    its HTTP request's headers, for servers traced at the HTTP layer. The client and its
    connection are shared by every call, so the context rides on the message; a message
    without one (nothing traced) costs a substring test."""
    try:
        content = request.content
    except httpx2.RequestNotRead:  # a streamed body: never a JSON-RPC message of ours
        return
    if b'"traceparent"' not in content:
        return
    params = orjson.loads(content).get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict):
        for name in ("traceparent", "tracestate"):
            if isinstance(value := meta.get(name), str):
                request.headers[name] = value


@dataclass
class _Held:
    client: Client
    release: asyncio.Event
    task: asyncio.Task[None]


class UpstreamLink:
    """One server: a connection held open by its own task (the SDK's client must be entered
    and left in one task), replaced after a fault; its last good tool list."""

    def __init__(self, server: McpServerSettings, connect: Connect, logger: logging.Logger):
        self.server = server
        self._connect = connect
        self._log = logger
        self._held: _Held | None = None
        self._lock = asyncio.Lock()
        self._tools: tuple[Tool, ...] | None = None

    async def call(
        self, tool: str, arguments: dict[str, Any], trace: dict[str, str] | None = None
    ) -> CallToolResult:
        """The upstream's result as it sent it; its own JSON-RPC errors are raised as
        `MCPError` naming the server; anything else is `UpstreamFailed`. `trace`: the W3C
        headers of the call's span, sent in `_meta` and in the HTTP request's headers."""
        meta = None if trace is None else RequestParamsMeta(**trace)  # type: ignore[typeddict-item]
        return await self._bounded(lambda c: c.call_tool(tool, arguments, meta=meta))

    async def tools(self) -> tuple[Tool, ...]:
        """The last good list; read once if never read (an empty list while it fails)."""
        if self._tools is None:
            await self.refresh()
        return self._tools or ()

    async def refresh(self) -> bool:
        """Read the tool list again; True when it changed. A failure keeps the last list."""
        try:
            listed = await self._bounded(_list_all)
        except (UpstreamFailed, MCPError) as exc:
            self._log.warning("mcp: cannot list the tools of %r: %s", self.server.name, exc)
            if self._tools is None:
                self._tools = ()  # listed without them until a refresh reads them
                return True
            return False
        changed = listed != self._tools
        self._tools = listed
        return changed

    async def aclose(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release.set()
            with suppress(BaseException):
                await held.task

    async def _bounded(self, step: Callable[[Client], Any]) -> Any:
        name, timeout_s = self.server.name, self.server.timeout_s
        used: _Held | None = None  # the connection this step ran on (None: none was made)
        try:
            async with asyncio.timeout(timeout_s):
                used = await self._connection()
                return await step(used.client)
        except MCPError as exc:
            fault = _CLIENT_FAULTS.get(exc.code)
            if fault is None:  # the server's own JSON-RPC error
                raise MCPError(exc.code, f"{name}: {exc.message}", exc.data) from exc
            self._drop(used)
            raise UpstreamFailed(name, fault, exc.message[:200]) from exc
        except TimeoutError as exc:
            self._drop(used)
            raise UpstreamFailed(name, "timed_out", f"no answer in {timeout_s:g} s") from exc
        except ValidationError as exc:
            self._drop(used)
            raise UpstreamFailed(name, "invalid_reply", "not an MCP message") from exc
        except Exception as exc:  # httpx2, anyio, the SDK's own: a broken connection
            self._drop(used)
            raise UpstreamFailed(name, "unreachable", type(exc).__name__) from exc

    async def _connection(self) -> _Held:
        async with self._lock:
            if self._held is None or self._held.task.done():
                self._held = await self._open()
            return self._held

    async def _open(self) -> _Held:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        release = asyncio.Event()

        async def hold() -> None:
            try:
                async with self._connect() as client:
                    ready.set_result(client)
                    await release.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        task = asyncio.create_task(hold(), name=f"mcp-upstream-{self.server.name}")
        try:
            return _Held(await asyncio.shield(ready), release, task)
        except BaseException:
            task.cancel()
            raise

    def _drop(self, used: _Held | None) -> None:
        """Forget the connection a failed step ran on (the next call makes a new one); close it
        in the background. One already replaced is left alone: a call failing late on an old
        connection must not tear down the new one other callers (other tenants) are using."""
        if used is None or self._held is not used:
            return
        self._held = None
        used.release.set()
        used.task.cancel()


async def _list_all(client: Client) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if not page.next_cursor:
            return tuple(tools)
        cursor = page.next_cursor


class UpstreamServers:
    """Every declared server by name; `refresh_all` re-reads the lists (the door's loop)."""

    def __init__(self, links: dict[str, UpstreamLink]) -> None:
        self._links = links

    @classmethod
    def from_settings(
        cls, servers: tuple[McpServerSettings, ...], logger: logging.Logger
    ) -> UpstreamServers:
        links = {
            server.name: UpstreamLink(
                server, partial(open_client, server, server.headers()), logger
            )
            for server in servers
        }
        return cls(links)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        trace: dict[str, str] | None = None,
    ) -> CallToolResult:
        link = self._links.get(server)
        if link is None:
            raise UpstreamFailed(server, "unreachable", "not declared in mcp_servers")
        return await link.call(tool, arguments, trace)

    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        link = self._links.get(server)
        return None if link is None else await link.tools()

    async def keep_fresh(self, on_change: Callable[[], None]) -> None:
        """Re-read each server's list every `refresh_s` (until cancelled); `on_change` after
        a list changed."""

        async def follow(link: UpstreamLink) -> None:
            while True:
                await asyncio.sleep(link.server.refresh_s)
                if await link.refresh():
                    on_change()

        await asyncio.gather(*(follow(link) for link in self._links.values()))

    async def aclose(self) -> None:
        for link in self._links.values():
            await link.aclose()
