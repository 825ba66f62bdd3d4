"""A streamed reply under Lantern's own HTTP protocol (gateway/http/server.py) is cancelled by
the connection when the client goes, with no watcher task of its own; under another server (no
scope extension) one task still watches. A real uvicorn server on a real socket, a client that
reads the first event and leaves while the reply waits for its next."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

from gateway.http.server import deadline_protocol
from gateway.http.sse_reply import DISCONNECT_HOOK, SSEReply

REQUEST = b"GET / HTTP/1.1\r\nhost: t\r\n\r\n"


class Seen:
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.watchers: list[int] = []
        self.hooked: list[bool] = []


def app_for(seen: Seen, admitting_s: float = 0.0) -> Any:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        seen.watchers.append(
            sum(
                t.get_coro().__qualname__ == "_cancel_on_disconnect"  # type: ignore[union-attr]
                for t in asyncio.all_tasks()
            )
        )
        try:
            await asyncio.sleep(60)  # the upstream's next event, long after the client left
        except asyncio.CancelledError:
            seen.cancelled.set()
            raise
        yield b"data: 2\n\n"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        seen.hooked.append(DISCONNECT_HOOK in scope.get("extensions", {}))
        await asyncio.sleep(admitting_s)  # the client may leave while the call is admitted
        await SSEReply(body(), 200, media_type="text/event-stream")(scope, receive, send)

    return app


async def _serve_and_leave(seen: Seen, protocol: Any, leave_at_once: bool = False) -> bool:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app_for(seen, 0.3 if leave_at_once else 0.0),
        http=protocol,
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        received = b""
        while not leave_at_once and b"data: 1" not in received:
            received += await reader.read(4096)
        writer.close()  # the client leaves mid-stream (or before the reply began)
        try:
            await asyncio.wait_for(seen.cancelled.wait(), 5.0)
        except TimeoutError:
            return False
        return True
    finally:
        server.should_exit = True
        await serving


def test_under_lanterns_protocol_the_connection_cancels_the_reply_without_a_task() -> None:
    seen = Seen()
    cancelled = asyncio.run(_serve_and_leave(seen, deadline_protocol(10.0, 60.0)))
    assert seen.hooked == [True]
    assert seen.watchers == [0]  # no task waits for http.disconnect
    assert cancelled  # at its await on the upstream, not at its next write


def test_under_another_server_one_task_watches_for_the_client_leaving() -> None:
    seen = Seen()
    cancelled = asyncio.run(_serve_and_leave(seen, "httptools"))
    assert seen.hooked == [False]
    assert seen.watchers == [1]
    assert cancelled


def test_a_client_that_left_before_the_reply_began_cancels_it_as_it_starts() -> None:
    """Gone while the call was admitted (no reply to cancel yet): the reply is cancelled at its
    first wait, not streamed to a closed connection while the upstream is paid."""
    seen = Seen()
    cancelled = asyncio.run(
        _serve_and_leave(seen, deadline_protocol(10.0, 60.0), leave_at_once=True)
    )
    assert seen.hooked == [True]
    assert cancelled
