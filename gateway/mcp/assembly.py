"""Builds the `/mcp` door for one gateway process, and starts and stops what it runs: the SDK's
session manager, the upstream servers' list refreshes and the list-change announcements.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

from mcp.server.transport_security import TransportSecuritySettings

from gateway.http.auth import KeyLookup
from gateway.mcp.accounting import ToolCallLedger
from gateway.mcp.calls import ToolCalls
from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.changes import ListChanges, Policies
from gateway.mcp.door import McpDoor
from gateway.mcp.key_watch import KeyWatch
from gateway.mcp.limits import ToolCallLimiter
from gateway.mcp.listen import TenantListens
from gateway.mcp.replay import ReplayEvents
from gateway.mcp.sandbox_tools import SandboxTools
from gateway.mcp.server import build_server
from gateway.mcp.sessions import TenantSessionManager
from gateway.mcp.upstream import UpstreamServers
from gateway.ports import LedgerPort
from gateway.settings import Settings
from gateway.telemetry import Telemetry
from policies.model import TenantPolicy
from quotas.store import QuotaStore
from sandbox.service import ToolRunService

log = logging.getLogger("lantern.mcp")


@dataclass(frozen=True, slots=True)
class McpPart:
    door: McpDoor
    start: Callable[[], Awaitable[None]]
    stop: Callable[[], Awaitable[None]]


class Keys(KeyLookup, Protocol):
    """The door's key lookup, which also says whether a key may still call."""

    def policy_for_key_id(self, tenant: str, key_id: str) -> TenantPolicy | None: ...


def build_mcp(
    settings: Settings,
    keys: Keys,
    policies: Policies,
    service: ToolRunService,
    ledger: LedgerPort,
    quotas: QuotaStore,
    telemetry: Telemetry,
    clock: Callable[[], float],
    wall_clock: Callable[[], float] = time.time,
) -> McpPart:
    """`quotas`: the model doors' store (tool limits and sessions' calls count there);
    `telemetry` traces each tool call (while tracing); `clock` times calls, `wall_clock` is the
    quota store's time."""
    cfg = settings.mcp
    upstreams = UpstreamServers.from_settings(settings.mcp_servers, log)
    catalogue = ToolCatalogue(upstreams, log)
    limiter = ToolCallLimiter(quotas, wall_clock)
    ledger_rows = ToolCallLedger(ledger, clock)
    calls = ToolCalls(catalogue, SandboxTools(service), upstreams, limiter, ledger_rows, telemetry)
    listens = TenantListens(catalogue, cfg.max_listens_per_tenant, cfg.max_sessions)
    changes = ListChanges(catalogue, policies, clock, cfg.session_idle_s, log, listens)
    manager = TenantSessionManager(
        build_server(catalogue, calls, changes, listens, telemetry),
        # Origin is checked by the door; the SDK's check would also pin the Host header
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=cfg.session_idle_s,
        max_request_body_size=settings.http.max_body_bytes,
        max_sessions=cfg.max_sessions,
        max_sessions_per_tenant=cfg.max_sessions_per_tenant,
        replay=_replay_events(settings),
        on_discard=changes.ended,  # a session's listing goes with it
    )
    watch = KeyWatch(
        lambda tenant, key_id: keys.policy_for_key_id(tenant, key_id) is not None,
        manager,
        listens,
        log,
    )
    stack = AsyncExitStack()
    tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        await stack.enter_async_context(manager.run())
        tasks.append(asyncio.create_task(changes.run(cfg.change_poll_s)))
        tasks.append(asyncio.create_task(watch.run(cfg.change_poll_s)))
        tasks.append(asyncio.create_task(upstreams.keep_fresh(changes.wake)))

    async def stop() -> None:
        listens.close()  # each listen stream ends with its result, as the spec's graceful close
        for task in tasks:
            task.cancel()
        await stack.aclose()
        await limiter.aclose()  # slots given back for calls whose clients left
        await upstreams.aclose()

    door = McpDoor(manager, keys, cfg.allowed_origins, telemetry)
    return McpPart(door, start, stop)


def _replay_events(settings: Settings) -> ReplayEvents | None:
    """The events each session keeps for a client resuming a stream; None: not resumable."""
    cfg = settings.mcp
    if not cfg.replay_events_per_session:
        return None
    return ReplayEvents(cfg.replay_events_per_session, cfg.replay_bytes_per_tenant)
