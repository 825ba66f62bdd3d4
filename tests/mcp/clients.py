"""The official `mcp` SDK client, unmodified, pointed at a gateway with a tenant's key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_client(
    url: str,
    key: str,
    mode: str = "auto",
    on_message: MessageHandlerFnT | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """`mode`: the SDK's own choice (`auto`: the 2026 wire when served) or `legacy` (the
    initialize handshake and an `Mcp-Session-Id`); `on_message`: the server's notifications;
    `headers`: more headers on every request (`x-session-id`)."""
    headers = {"Authorization": f"Bearer {key}", **(headers or {})}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            cache=None,
            message_handler=on_message,
        ) as client,
    ):
        yield client
