"""One plain-HTTP/1.1 keep-alive connection to an upstream: an asyncio protocol with httptools'
response parser (the C parser uvicorn serves us with). The pool that reuses them is `pool.py`.

One exchange at a time per connection; no TLS, redirects, compression or pipelining. Knows no
wire schema and no error types of ours: failures are `OSError`s and `TimeoutError`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Protocol, cast

import httptools

from adapters.http.http1.deadlines import Deadlines

MAX_BUFFERED_BYTES = 1 << 20  # unread body past this pauses the socket until the reader catches up


class UpstreamProtocolError(ConnectionError):
    """The upstream broke HTTP/1.1: an unparsable reply, a connection closed mid-reply, bytes
    sent while no request was in flight, or a content encoding we never asked for."""


class Http1Connection(asyncio.Protocol):
    """Call `send`, then `head` and `read_some` until it returns None (or `read_all`); the
    connection is `is_reusable` once a reply ended cleanly and the server keeps it alive."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_closed: Callable[[], None],
        deadlines: Deadlines | None = None,
    ) -> None:
        self._loop = loop
        self._on_closed = on_closed
        self._deadlines = deadlines or Deadlines(loop)
        # the exchange's deadline (`expire_after`) and the one in force (a wait's own, else that)
        self._until: float | None = None
        self.deadline: float | None = None
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._is_closed = False
        self._is_busy = False
        self._is_paused = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._name = ""
        self._chunks: list[bytes] = []
        self._num_buffered = 0
        self._is_head_done = False
        self._is_done = False
        self._ends_at_eof = False
        self._keeps_alive = False
        self._error: Exception | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a small reply must not wait for Nagle's delayed ACK
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if not self._is_busy:
            self._fail(UpstreamProtocolError("the upstream sent bytes with no request in flight"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP reply ({exc})"))
            return
        if self._error is not None:
            self._fail(self._error)
            return
        if self._num_buffered > MAX_BUFFERED_BYTES and not self._is_paused:
            self._is_paused = True
            self._transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed, self._is_closed = self._is_closed, True
        if self._is_busy and not self._is_done:
            if self._is_head_done and self._ends_at_eof:
                self._is_done = True  # a reply without a length ends where the connection does
            elif self._error is None:
                detail = f" ({exc})" if exc else ""
                self._error = UpstreamProtocolError(f"the upstream closed the connection{detail}")
        self._wake()
        if not was_closed:
            self._on_closed()

    # --- httptools callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._keeps_alive = self._parser.should_keep_alive()  # reset once the reply ends
        h = self.headers
        self._ends_at_eof = "content-length" not in h and "transfer-encoding" not in h
        encoding = h.get("content-encoding", "identity")
        if encoding.lower() != "identity":  # we send no accept-encoding: nothing to decode
            self._error = UpstreamProtocolError(f"unasked content-encoding {encoding!r}")
        self._is_head_done = True

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._num_buffered += len(body)

    def on_message_complete(self) -> None:
        self._is_done = True

    # --- the exchange ------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def is_reusable(self) -> bool:
        return not self._is_closed and self._is_done and self._error is None and self._keeps_alive

    def expire_after(self, timeout_s: float) -> None:
        """The exchange fails with `TimeoutError` if it is not over within `timeout_s`; a
        wait's own `timeout_s` applies on top."""
        self._until = self.deadline = self._deadlines.time() + timeout_s
        self._deadlines.watch(self, self._until)

    def expire(self) -> None:
        """Its deadline passed (`Deadlines`): what waits gets `TimeoutError`, as from
        `asyncio.timeout`, and the connection closes."""
        self._fail(TimeoutError())

    def send(self, head: bytes, body: bytes) -> None:
        if self._is_closed or self._transport is None:
            raise UpstreamProtocolError("the connection is closed")
        self._reset()
        self._is_busy = True
        self._transport.writelines((head, body))

    async def head(self, timeout_s: float | None = None) -> None:
        """Until the reply's status line and headers are in (`status`, `headers`)."""
        while not self._is_head_done:
            await self._wait(timeout_s)

    async def read_some(self, timeout_s: float | None = None) -> bytes | None:
        """The body bytes that arrived since the last call (all reads so far, joined), waiting
        up to `timeout_s` for at least one; None once the reply has ended."""
        while not self._chunks:
            if self._is_done:
                return None
            await self._wait(timeout_s)
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks, self._num_buffered = [], 0
        if self._is_paused:
            self._is_paused = False
            self._transport.resume_reading()  # type: ignore[union-attr]
        return data

    async def read_all(self, timeout_s: float | None = None) -> bytes:
        parts = []
        while (data := await self.read_some(timeout_s)) is not None:
            parts.append(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def finish(self) -> None:
        """The exchange is over (ended or abandoned): an unfinished one closes the connection."""
        self._is_busy = False
        self._until = self.deadline = None
        self._deadlines.forget(self)
        if not self.is_reusable:
            self.close()

    def close(self) -> None:
        if self._transport is not None and not self._is_closed:
            self._transport.close()

    async def _wait(self, timeout_s: float | None) -> None:
        if self._error is not None:
            raise self._error
        waiter = self._waiter = self._loop.create_future()
        if timeout_s is not None:  # this wait's own deadline, kept by the loop's one timer
            when = self._deadlines.time() + timeout_s
            self.deadline = when = when if self._until is None else min(when, self._until)
            self._deadlines.watch(self, when)
        try:
            await waiter
        finally:
            self._waiter = None
            self.deadline = self._until
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self.close()
        self._wake()


class ConnectionSource(Protocol):
    """Where an upstream takes a connection for one exchange and gives it back (`Http1Pool`)."""

    async def acquire(self, host: str, port: int, timeout_s: float) -> Http1Connection: ...

    def release(self, conn: Http1Connection, host: str, port: int) -> None: ...
