"""The sessions `ListChanges` keeps to tell of a tenant's list changes are the sessions the
tenant holds open: one that ends (its DELETE) is forgotten at once, so a tenant that opens,
lists and ends sessions in a loop keeps no more than its open ones (and the change checks,
shared by every tenant, never walk its dead sessions). The real door and session manager over
ASGI, two tenants."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.sdk.trace import TracerProvider

from gateway.mcp.changes import ListChanges
from gateway.mcp.door import McpDoor
from gateway.mcp.server import build_server
from gateway.mcp.sessions import TenantSessionManager
from gateway.telemetry import Metrics, Telemetry
from policies.model import TenantPolicy
from tests.mcp.asgi_door import Keys, call_door
from tests.mcp.harness import INITIALIZE

VERSION = str(INITIALIZE["params"]["protocolVersion"])  # type: ignore[index]
LIMIT = 2


class Catalogue:
    async def listing_and_digest(self, policy: TenantPolicy) -> tuple[tuple[()], str]:
        return (), "d0"


class NoPolicies:
    def get(self, tenant: str) -> TenantPolicy | None:
        return None


async def _open_and_list(door: McpDoor, key: str) -> dict[str, str]:
    """A session opened and its tools listed; the headers that name it."""
    status, headers, _ = await call_door(door, key, body=INITIALIZE)
    assert status == 200
    named = {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": VERSION}
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await call_door(door, key, body=done, headers=named))[0] == 202
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    assert (await call_door(door, key, body=listing, headers=named))[0] == 200
    return named


def test_an_ended_session_is_no_longer_kept_to_be_told_of_changes() -> None:
    log = logging.getLogger("test.mcp")
    changes = ListChanges(
        cast(Any, Catalogue()), NoPolicies(), lambda: 0.0, 600.0, log, cast(Any, None)
    )
    telemetry = Telemetry(TracerProvider(), Metrics())
    server = build_server(
        cast(Any, Catalogue()), cast(Any, None), changes, cast(Any, None), telemetry
    )
    sessions = TenantSessionManager(
        server,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=600.0,
        max_sessions=100,
        max_sessions_per_tenant=LIMIT,
        on_discard=changes.ended,
    )
    door = McpDoor(sessions, Keys(), (), telemetry)

    async def main() -> None:
        async with sessions.run():
            neighbour = await _open_and_list(door, "globex-key")
            for _ in range(10):  # acme opens, lists and ends sessions in a loop
                named = await _open_and_list(door, "acme-key")
                status, _, _ = await call_door(door, "acme-key", "DELETE", None, named)
                assert status == 200
            assert sessions.open_sessions("acme") == 0
            assert (changes.num_listed("acme"), changes.num_listed("globex")) == (0, 1)
            await _open_and_list(door, "acme-key")
            assert changes.num_listed("acme") == 1
            status, _, _ = await call_door(door, "globex-key", "DELETE", None, neighbour)
            assert status == 200
            assert (changes.num_listed("acme"), changes.num_listed("globex")) == (1, 0)

    asyncio.run(main())
