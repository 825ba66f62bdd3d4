"""The process-wide pool of plain-HTTP/1.1 keep-alive connections, and the choice of client per
URL: ours for `http://`, aiohttp's for every other. Knows no wire schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping

from adapters.http.aiohttp_pool import AiohttpPool
from adapters.http.http1.connection import Http1Connection
from adapters.http.http1.deadlines import Deadlines
from adapters.http.http1.upstream import Http1Upstream, is_plain_http
from adapters.http.upstream import Upstream


class Http1Pool:
    """The process-wide pool of upstream connections, made before any loop runs (backends are
    built in `create_app`); connections belong to the loop that opened them, so a new loop starts
    an empty pool. Idle connections are reused newest first and dropped after `keepalive_s`, before
    the upstream drops them (uvicorn closes idle keep-alives after 5 s: a request written onto a
    connection the server is closing fails). `https` URLs go through `tls`, an `AiohttpPool`."""

    def __init__(
        self,
        *,
        max_connections: int = 1000,
        keepalive_s: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tls = AiohttpPool(max_connections=max_connections, keepalive_s=keepalive_s)
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadlines: Deadlines | None = None
        self._idle: dict[tuple[str, int], list[Http1Connection]] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.num_open = 0
        self.num_connects = 0

    def upstream(self, backend: str, url: str, headers: Mapping[str, str]) -> Upstream:
        """Our HTTP/1.1 client for a plain `http://` URL, aiohttp (`tls`) for every other."""
        if is_plain_http(url):
            return Http1Upstream(backend, self, url, headers)
        return self.tls.upstream(backend, url, headers)

    async def acquire(self, host: str, port: int, timeout_s: float) -> Http1Connection:
        """An idle connection to (host, port), or a new one once fewer than `max_connections`
        are open; either within `timeout_s`."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the old loop's transports died with it
            self._loop, self._idle, self._waiters, self.num_open = loop, {}, deque(), 0
            self._deadlines = Deadlines(loop)
        conn = self._take_idle(host, port)
        if conn is not None:  # the common case: no wait, so no timer
            return conn
        async with asyncio.timeout(timeout_s):
            return await self._wait_or_connect(loop, host, port)

    async def _wait_or_connect(
        self, loop: asyncio.AbstractEventLoop, host: str, port: int
    ) -> Http1Connection:
        while True:
            conn = self._take_idle(host, port)
            if conn is not None:
                return conn
            if self.num_open < self._max_connections:
                break
            self._close_an_idle_one()  # another host's idle connection gives its slot up
            waiter = loop.create_future()  # woken by a release or a close
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        self.num_open += 1
        self.num_connects += 1
        try:
            _, conn = await loop.create_connection(
                lambda: Http1Connection(loop, self._closed_one, self._deadlines), host, port
            )
        except BaseException:
            self._closed_one()
            raise
        return conn

    def _take_idle(self, host: str, port: int) -> Http1Connection | None:
        idle = self._idle.get((host, port))
        now = self._clock()
        while idle:
            conn = idle.pop()
            if not conn.is_closed and now - conn.idle_since < self._keepalive_s:
                return conn
            conn.close()
        return None

    def _close_an_idle_one(self) -> None:
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()  # the oldest; its connection_lost frees the slot
                return

    def release(self, conn: Http1Connection, host: str, port: int) -> None:
        """Back to the idle list when its exchange ended cleanly, else closed."""
        conn.finish()
        if conn.is_reusable:
            conn.idle_since = self._clock()
            self._idle.setdefault((host, port), []).append(conn)
            self._wake_one()

    def _closed_one(self) -> None:
        self.num_open -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle = {}
        await self.tls.aclose()
