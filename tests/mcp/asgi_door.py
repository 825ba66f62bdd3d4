"""Driving the `/mcp` door in process, over ASGI, as a client would: the keys of two tenants (acme
with two keys, globex) and one HTTP request through the door, read until its reply ends or the
test has seen enough (then the client goes away)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from gateway.mcp.door import McpDoor
from policies.model import TenantPolicy

KEYS = {
    "acme-key": (TenantPolicy(tenant="acme"), "k1"),
    "acme-key-2": (TenantPolicy(tenant="acme"), "k2"),
    "globex-key": (TenantPolicy(tenant="globex"), "k1"),
}


class Keys:
    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        return KEYS.get(key)


async def call_door(
    door: McpDoor,
    key: str,
    method: str = "POST",
    body: object = None,
    headers: dict[str, str] | None = None,
    enough: Callable[[bytes], bool] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """Its status, headers and body, read until the reply ends or `enough(body so far)`."""
    raw = {
        "authorization": f"Bearer {key}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        **(headers or {}),
    }
    scope = {
        "type": "http",
        "method": method,
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in raw.items()],
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1),
        "http_version": "1.1",
        "root_path": "",
    }
    payload = orjson.dumps(body) if body is not None else b""
    out: dict[str, Any] = {"body": b""}
    sent, gone = False, asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")
            if not message.get("more_body") or (enough is not None and enough(out["body"])):
                gone.set()

    await asyncio.wait_for(door(scope, receive, send), 10)
    return out["status"], out["headers"], out["body"]
