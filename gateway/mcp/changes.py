"""`notifications/tools/list_changed`: the sessions that listed a tenant's tools, told when the
tenant's list really changed (its policy, or an upstream server's list); and, on the 2026-07-28
wire, the tenant's open `subscriptions/listen` streams (gateway/mcp/listen.py).

A handshake-era session is forgotten when the session manager discards it (`ended`), or idle
past the door's `session_idle_s`: the sessions kept per tenant are at most those it holds open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mcp.server.session import ServerSession

from gateway.mcp.catalogue import ToolCatalogue
from policies.model import TenantPolicy


class Policies(Protocol):
    def get(self, tenant: str) -> TenantPolicy | None: ...


class Listeners(Protocol):
    """The listen streams (`TenantListens`)."""

    def tenants(self) -> set[str]: ...

    async def listing_is(self, tenant: str, digest: str) -> None: ...

    def gone(self, tenant: str) -> None: ...


@dataclass
class _Listed:
    session: ServerSession
    digest: str
    seen_at: float


class ListChanges:
    def __init__(
        self,
        catalogue: ToolCatalogue,
        policies: Policies,
        clock: Callable[[], float],
        idle_s: float,
        logger: logging.Logger,
        listeners: Listeners,
    ) -> None:
        self._listeners = listeners
        self._catalogue = catalogue
        self._policies = policies
        self._clock = clock
        self._idle_s = idle_s
        self._log = logger
        self._sessions: dict[str, dict[str, _Listed]] = {}
        self._wake = asyncio.Event()

    def listed(self, tenant: str, session_id: str, session: ServerSession, digest: str) -> None:
        """A session of `tenant` was just answered the listing `digest`."""
        self._sessions.setdefault(tenant, {})[session_id] = _Listed(session, digest, self._clock())

    def ended(self, tenant: str, session_id: str) -> None:
        """The session is gone (its DELETE, its idle timeout, its key's end): nobody to tell."""
        sessions = self._sessions.get(tenant)
        if sessions is not None and sessions.pop(session_id, None) is not None and not sessions:
            del self._sessions[tenant]

    def num_listed(self, tenant: str) -> int:
        """The tenant's sessions to tell of a change."""
        return len(self._sessions.get(tenant, ()))

    def wake(self) -> None:
        """Check now (an upstream server's list changed)."""
        self._wake.set()

    async def run(self, interval_s: float) -> None:
        """Check every `interval_s` or when woken, until cancelled."""
        while True:
            try:
                async with asyncio.timeout(interval_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # the next round tries again; never end the loop
                self._log.exception("mcp: checking for tool list changes failed")

    async def check(self) -> None:
        listening = self._listeners.tenants()
        for tenant in [*self._sessions, *(t for t in listening if t not in self._sessions)]:
            policy = self._policies.get(tenant)
            if policy is None:  # the tenant is gone; its keys no longer open anything
                self._sessions.pop(tenant, None)
                self._listeners.gone(tenant)
                self._catalogue.forget(tenant)
                continue
            digest = await self._catalogue.digest(policy)
            if (sessions := self._sessions.get(tenant)) is not None:
                await self._tell(sessions, digest)
            if tenant in listening:
                await self._listeners.listing_is(tenant, digest)

    async def _tell(self, sessions: dict[str, _Listed], digest: str) -> None:
        stale_before = self._clock() - self._idle_s
        for session_id, listed in list(sessions.items()):
            if listed.seen_at < stale_before:
                del sessions[session_id]
            elif listed.digest != digest:
                listed.digest = digest
                try:
                    await listed.session.send_tool_list_changed()
                except Exception:  # the session ended: nobody to tell
                    del sessions[session_id]
