"""The streamed (SSE) reply of the chat doors, written straight to the ASGI server.

Starlette's `StreamingResponse` (the reference path) runs an anyio task group per stream to
watch for the client leaving; this reply keeps the same bytes, headers and disconnect semantics
without one. Under Lantern's own HTTP protocol (gateway/http/server.py) the connection itself
cancels the reply when it is lost (scope extension `DISCONNECT_HOOK`): no task at all. Under
another server, one plain asyncio task waits for `http.disconnect` (a task created and
cancelled per stream costs ~41 µs of CPU on a loop that idled between calls). Knows no wire
format.
"""

from __future__ import annotations

import asyncio

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

# the scope extension whose "connection" is a `DisconnectHook`
DISCONNECT_HOOK = "lantern.disconnect"


class DisconnectHook:
    """The connection's side of a streamed reply's disconnect, for the connection to inherit:
    it calls `client_gone` when it is lost, and the reply it watches is cancelled at once (or
    as it starts, when the client left while the call was admitted)."""

    _watched: asyncio.Task[object] | None = None
    _client_left = False
    _is_gone = False

    def watch_disconnect(self, task: asyncio.Task[object]) -> None:
        """Cancel `task` if the client goes before `unwatch_disconnect` (or went already)."""
        self._watched, self._client_left = task, False
        if self._is_gone:
            self.client_gone()

    def unwatch_disconnect(self) -> bool:
        """Stop watching; True when the client went meanwhile (the task was cancelled)."""
        self._watched = None
        return self._client_left

    def client_gone(self) -> None:
        self._is_gone = True
        watched, self._watched = self._watched, None
        if watched is not None and not watched.done():
            self._client_left = True
            watched.cancel()


class SSEReply(StreamingResponse):
    """A 200 event stream; when the client disconnects, the body iterator is cancelled at its
    current await (as the reference path's cancel scope does) and the reply ends quietly."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        writer = asyncio.current_task()
        assert writer is not None
        extension = scope.get("extensions", {}).get(DISCONNECT_HOOK)
        hook: DisconnectHook = extension["connection"] if extension else ReceiveWatch(receive)
        hook.watch_disconnect(writer)
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not hook.unwatch_disconnect() or writer.uncancel() > 0:
                raise  # (also) cancelled from outside, e.g. server shutdown
        finally:
            hook.unwatch_disconnect()


class ReceiveWatch(DisconnectHook):
    """The hook under a server without `DISCONNECT_HOOK`: one task per stream waits for
    `http.disconnect`, as the ASGI spec has a reply learn of it."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Task[None] | None = None

    def watch_disconnect(self, task: asyncio.Task[object]) -> None:
        super().watch_disconnect(task)
        self._task = asyncio.create_task(_cancel_on_disconnect(self._receive, self))

    def unwatch_disconnect(self) -> bool:
        if self._task is not None:
            self._task.cancel()
        return super().unwatch_disconnect()


async def _cancel_on_disconnect(receive: Receive, hook: DisconnectHook) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    hook.client_gone()
