"""A key that may no longer call (revoked, expired, over its budget, or gone from the policy)
loses what it holds open on `/mcp`, not just its next request: its handshake-era sessions end
(`TenantSessionManager.end_key`: their GET streams close, a request naming one gets 404) and its
`subscriptions/listen` streams end with their result (`TenantListens.end_key`). Checked every
`mcp.change_poll_s` for the keys holding a session or a stream; requests already being answered
finish, as on the model doors, and every later request of the key is refused by the door (401).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

KeyId = tuple[str, str]  # (tenant, key id)


class KeySessions(Protocol):
    """The handshake-era sessions (`TenantSessionManager`)."""

    def keys(self) -> set[KeyId]: ...

    async def end_key(self, tenant: str, key_id: str) -> None: ...


class KeyListens(Protocol):
    """The listen streams (`TenantListens`)."""

    def keys(self) -> set[KeyId]: ...

    def end_key(self, tenant: str, key_id: str) -> None: ...


class KeyWatch:
    """Ends the sessions and streams of keys that may no longer call. `usable(tenant, key_id)`:
    whether the key may call now (the key lookup's view: YAML keys, then issued keys)."""

    def __init__(
        self,
        usable: Callable[[str, str], bool],
        sessions: KeySessions,
        listens: KeyListens,
        logger: logging.Logger,
    ) -> None:
        self._usable = usable
        self._sessions = sessions
        self._listens = listens
        self._log = logger

    async def check(self) -> None:
        for tenant, key_id in self._sessions.keys() | self._listens.keys():
            if self._usable(tenant, key_id):
                continue
            self._log.info("mcp: key %s of %s may no longer call: its sessions end", key_id, tenant)
            self._listens.end_key(tenant, key_id)
            await self._sessions.end_key(tenant, key_id)

    async def run(self, interval_s: float) -> None:
        """Check every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.check()
            except Exception:  # the next round tries again; never end the loop
                self._log.exception("mcp: checking keys with open sessions failed")
