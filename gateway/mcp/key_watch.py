"""A key that may no longer call (revoked, expired, over its budget, or gone from the policy)
loses its open MCP streams, not just its next request: the handshake-era GET stream of each of
its sessions (`KeyStreams`, kept by the door) and its `subscriptions/listen` streams
(`TenantListens.end_key`). Checked every `mcp.change_poll_s` for the keys with a stream open;
requests already being answered finish, as on the model doors, and every later request of the
key is refused by the door (401).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

KeyId = tuple[str, str]  # (tenant, key id)


class KeyStreams:
    """The handshake-era GET streams open now, by key; at most one per session (the SDK answers
    a second one 409), so bounded by `mcp.max_sessions`."""

    def __init__(self) -> None:
        self._open: dict[KeyId, set[anyio.CancelScope]] = {}

    async def serve(
        self, key: KeyId, app: ASGIApp, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Let `app` (the SDK's session manager) answer one GET until it ends or the key is
        ended; an ended stream's response is closed as a server closes an SSE stream (an empty
        last chunk), so the client sees the stream end, not a broken connection."""
        state = {"started": False, "done": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["done"] = True
            await send(message)

        async with self._held(key) as held:
            await app(scope, receive, tracked)
        if held.cancelled_caught and state["started"] and not state["done"]:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    @asynccontextmanager
    async def _held(self, key: KeyId) -> AsyncIterator[anyio.CancelScope]:
        with anyio.CancelScope() as scope:
            scopes = self._open.setdefault(key, set())
            scopes.add(scope)
            try:
                yield scope
            finally:
                scopes.discard(scope)
                if not scopes and self._open.get(key) is scopes:
                    del self._open[key]

    def keys(self) -> set[KeyId]:
        return set(self._open)

    def end(self, key: KeyId) -> None:
        for scope in self._open.pop(key, ()):
            scope.cancel()


class KeyListens(Protocol):
    """The listen streams (`TenantListens`)."""

    def keys(self) -> set[KeyId]: ...

    def end_key(self, tenant: str, key_id: str) -> None: ...


class KeyWatch:
    """Ends the streams of keys that may no longer call. `usable(tenant, key_id)`: whether the
    key may call now (the key lookup's view: YAML keys, then issued keys)."""

    def __init__(
        self,
        usable: Callable[[str, str], bool],
        streams: KeyStreams,
        listens: KeyListens,
        logger: logging.Logger,
    ) -> None:
        self._usable = usable
        self._streams = streams
        self._listens = listens
        self._log = logger

    def check(self) -> None:
        for tenant, key_id in self._streams.keys() | self._listens.keys():
            if self._usable(tenant, key_id):
                continue
            self._log.info("mcp: key %s of %s may no longer call: its streams end", key_id, tenant)
            self._streams.end((tenant, key_id))
            self._listens.end_key(tenant, key_id)

    async def run(self, interval_s: float) -> None:
        """Check every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.check()
            except Exception:  # the next round tries again; never end the loop
                self._log.exception("mcp: checking keys with open streams failed")
