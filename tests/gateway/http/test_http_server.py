"""gateway/http/server.py: the once-a-second tick serves the Date header, and an exit request
ends the tick's wait at once (a real uvicorn server on a real socket, in a thread)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from email.utils import parsedate_to_datetime

import httpx
import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.http.server import TickServer


async def hello(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hi"})


def start(tick_s: float) -> tuple[TickServer, threading.Thread, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(hello, lifespan="off", log_level="warning", access_log=False)
    server = TickServer(config, tick_s=tick_s)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    return server, thread, port


def test_exit_signal_ends_the_tick_wait() -> None:
    """With a 60 s tick, only the exit request can end the wait within the join's 20 s."""
    server, thread, port = start(tick_s=60.0)
    reply = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
    assert reply.text == "hi"
    served = parsedate_to_datetime(reply.headers["date"]).timestamp()
    assert abs(served - time.time()) < 5  # the first tick set a current Date header
    server.handle_exit(signal.SIGTERM, None)
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert server.num_ticks == 2  # the first, and the one after the exit request


def test_tick_refreshes_the_date_header() -> None:
    server, thread, port = start(tick_s=0.05)
    try:
        first = httpx.get(f"http://127.0.0.1:{port}/", timeout=10).headers["date"]
        deadline = time.monotonic() + 20
        while (
            later := httpx.get(f"http://127.0.0.1:{port}/", timeout=10).headers["date"]
        ) == first:
            assert time.monotonic() < deadline, "the Date header was never refreshed"
            time.sleep(0.2)
        assert parsedate_to_datetime(later) > parsedate_to_datetime(first)
    finally:
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=20)
    assert not thread.is_alive()
