"""Handshake-era sessions per tenant, in process: the real door in front of the SDK's session
manager (`TenantSessionManager`), driven over ASGI. acme at its limit is refused (429, rule
`max_sessions_per_tenant`) before the SDK reads its body, while globex still opens sessions; a
session acme ends, or one that idles out, gives its place back; openers arriving together never
hold more than the limit; the 2026-07-28 wire, which opens no session, is not refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import orjson
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings

from gateway.mcp.door import McpDoor
from gateway.mcp.sessions import TenantSessionManager
from tests.mcp.asgi_door import Keys, call_door
from tests.mcp.harness import INITIALIZE

LIMIT = 2


async def request(
    door: McpDoor, key: str, method: str = "POST", body: object = INITIALIZE, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request through the door: its status, headers and whole body."""
    return await call_door(door, key, method, body, headers)


@asynccontextmanager
async def serving(idle_s: float = 60.0) -> AsyncIterator[tuple[TenantSessionManager, McpDoor]]:
    """A running session manager, `LIMIT` sessions a tenant, and the door in front of it."""
    sessions = TenantSessionManager(
        Server("tenant-sessions"),
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=idle_s,
        max_sessions=100,
        max_sessions_per_tenant=LIMIT,
    )
    telemetry: Any = SimpleNamespace(is_tracing=False)
    async with sessions.run():
        yield sessions, McpDoor(sessions, Keys(), (), telemetry)


def test_a_tenant_at_its_limit_is_refused_and_its_neighbour_is_not() -> None:
    async def main() -> None:
        async with serving() as (sessions, door):
            opened = [await request(door, "acme-key") for _ in range(LIMIT)]
            assert [status for status, _, _ in opened] == [200] * LIMIT
            status, _, body = await request(door, "acme-key")
            assert status == 429
            error = orjson.loads(body)["error"]
            assert error["code"] == -32029
            assert error["data"] == {"rule": "max_sessions_per_tenant", "limit": LIMIT}
            assert sessions.open_sessions("acme") == LIMIT
            neighbour = [await request(door, "globex-key") for _ in range(LIMIT)]
            assert [status for status, _, _ in neighbour] == [200] * LIMIT
            # the 2026-07-28 wire opens no session: not refused by the count
            modern = {"mcp-protocol-version": "2026-07-28"}
            status, _, _ = await request(door, "acme-key", body=INITIALIZE, **modern)
            assert status != 429
            # a session acme ends gives its place back
            session = opened[0][1]["mcp-session-id"]
            version = {"mcp-protocol-version": "2025-11-25", "mcp-session-id": session}
            status, _, _ = await request(door, "acme-key", "DELETE", None, **version)
            assert status == 200
            assert sessions.open_sessions("acme") == LIMIT - 1
            assert (await request(door, "acme-key"))[0] == 200

    asyncio.run(main())


def test_openers_arriving_together_never_hold_more_than_the_limit() -> None:
    async def main() -> None:
        async with serving() as (sessions, door):
            replies = await asyncio.gather(*(request(door, "acme-key") for _ in range(5)))
            statuses = sorted(status for status, _, _ in replies)
            assert statuses.count(200) == LIMIT
            assert all(status in (429, 503) for status in statuses[LIMIT:])
            assert sessions.open_sessions("acme") == LIMIT

    asyncio.run(main())


def test_a_session_that_idles_out_gives_its_place_back() -> None:
    async def main() -> None:
        async with serving(idle_s=0.3) as (sessions, door):
            for _ in range(LIMIT):
                assert (await request(door, "acme-key"))[0] == 200
            assert (await request(door, "acme-key"))[0] == 429
            for _ in range(50):
                if sessions.open_sessions("acme") == 0:
                    break
                await asyncio.sleep(0.1)
            assert sessions.open_sessions("acme") == 0
            assert (await request(door, "acme-key"))[0] == 200

    asyncio.run(main())


def test_a_keys_sessions_end_and_the_tenants_other_key_keeps_its_own() -> None:
    async def main() -> None:
        async with serving() as (sessions, door):
            _, first, _ = await request(door, "acme-key")
            _, second, _ = await request(door, "acme-key-2")
            assert sessions.keys() == {("acme", "k1"), ("acme", "k2")}
            await sessions.end_key("acme", "k2")
            assert sessions.keys() == {("acme", "k1")} and sessions.open_sessions("acme") == 1
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            for key, opened, status in (("acme-key-2", second, 404), ("acme-key", first, 200)):
                named = {
                    "mcp-protocol-version": "2025-11-25",
                    "mcp-session-id": opened["mcp-session-id"],
                }
                assert (await request(door, key, body=ping, **named))[0] == status
            await sessions.end_key("acme", "k2")  # nothing left of it: nothing happens
            assert sessions.open_sessions("acme") == 1

    asyncio.run(main())
