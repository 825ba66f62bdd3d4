"""What `lantern serve` runs the app on: uvicorn's `Server` with a once-a-second tick, and the
httptools protocol with read deadlines for slow clients.

Owns the server's wake-ups and connection deadlines; no request handling, no settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http.readiness import Readiness
from gateway.http.sse_reply import DISCONNECT_HOOK, DisconnectHook

DATE_EVERY_TICKS = 10  # uvicorn's `on_tick` refreshes the Date header when `counter % 10 == 0`


class TickServer(uvicorn.Server):
    """Ticks every `tick_s` (1 s) instead of uvicorn's 0.1 s. A tick only refreshes the `Date`
    header (once a second either way) and looks for an exit request; ten wake-ups a second were
    most of an idle gateway's CPU. An exit signal ends the wait at once, so shutting down is as
    prompt as before; an exit asked by setting `should_exit` alone is seen at the next tick.

    The first exit signal marks `readiness` draining; the server goes on serving for
    `drain_grace_s` (a load balancer polling /ready stops sending meanwhile), then shuts down as
    uvicorn does: the listener closes, calls in flight get `timeout_graceful_shutdown`."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        tick_s: float = 1.0,
        readiness: Readiness | None = None,
        drain_grace_s: float = 0.0,
    ) -> None:
        super().__init__(config)
        self.tick_s = tick_s
        self.num_ticks = 0
        self.readiness = readiness or Readiness()
        self.drain_grace_s = drain_grace_s
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        first = self.readiness.state != "draining"
        self.readiness.drain()
        if first and self.drain_grace_s > 0 and self._loop is not None:
            self._loop.call_soon_threadsafe(
                self._loop.call_later, self.drain_grace_s, self._exit_now, sig, frame
            )
            return
        self._exit_now(sig, frame)

    def _exit_now(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._exit_asked is not None:
            self._loop.call_soon_threadsafe(self._exit_asked.set)

    async def on_tick(self, counter: int) -> bool:
        self.num_ticks += 1
        return await super().on_tick(counter)

    async def main_loop(self) -> None:
        self._loop, self._exit_asked = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + DATE_EVERY_TICKS) % 864000  # uvicorn's own wrap-around
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit_asked.wait(), self.tick_s)
            should_exit = await self.on_tick(counter)


class DeadlineWatch:
    """The connections of one server that await a part of a request, swept every `interval_s`
    for those past their deadline. One timer for all of them, and only while any is open: a
    timer armed and cancelled per request cost ~0.1-0.2 ms of CPU a call at 25-50 calls/s."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.connections: set[DeadlineProtocol] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, connection: DeadlineProtocol) -> None:
        self.connections.add(connection)
        if self._timer is None:
            loop = connection.loop
            self._timer = loop.call_later(self.interval_s, self._sweep, loop)

    def discard(self, connection: DeadlineProtocol) -> None:
        self.connections.discard(connection)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for late in [c for c in self.connections if c.due is not None and c.due <= now]:
            late.expire()
        self._timer = None
        if self.connections:
            self._timer = loop.call_later(self.interval_s, self._sweep, loop)


class DeadlineProtocol(DisconnectHook, HttpToolsProtocol):
    """httptools' protocol with two read deadlines (uvicorn has neither): a request's headers
    must be complete within `header_timeout_s` of the connection opening or of the request's
    first byte, and its body within `body_timeout_s` of the headers. Past one, the connection
    is closed (after a 408 when no response has started), so a client that sends a few bytes
    and stalls cannot hold a connection, a task or a buffer for ever. A connection only notes
    its deadline; its server's `DeadlineWatch` closes it at most a quarter of the shorter
    deadline (and 1 s) late. The wait for the next request on a kept-alive connection is a
    deadline of the same watch (uvicorn armed a timer after every response and cancelled it
    at the next request: ~55 µs of CPU a call on a loop that idled between calls), closed as
    uvicorn does, without a 408. A streamed reply is cancelled by the connection when it is
    lost (`DisconnectHook`, in the scope's extensions), not by a task of its own per stream.
    Subclasses set the deadlines and the watch (see `deadline_protocol`)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    watch: DeadlineWatch
    due: float | None = None  # the loop time by which the awaited part must have arrived
    _awaits_headers = True
    _is_idle = False  # kept alive, no request begun since the last response

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # ASGI extensions are dicts: the connection under "connection" (`sse_reply`)
        self._extensions: dict[str, dict[object, object]] = {DISCONNECT_HOOK: {"connection": self}}
        self.due, self._awaits_headers = self.loop.time() + self.header_timeout_s, True
        self.watch.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.discard(self)
        self.due = None
        super().connection_lost(exc)
        self.client_gone()  # a streamed reply watching this connection is cancelled now

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions  # uvicorn sets none
        if self.due is None or self._is_idle:
            self.due, self._awaits_headers = self.loop.time() + self.header_timeout_s, True
            self._is_idle = False

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.due, self._awaits_headers = self.loop.time() + self.body_timeout_s, False

    def on_message_complete(self) -> None:
        self.due = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's, but the keep-alive wait is this connection's deadline (see the class)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request is next: its own deadlines apply
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self.due is None:  # not already reading the next request
            self.due, self._is_idle = self.loop.time() + self.timeout_keep_alive, True

    def expire(self) -> None:
        self.due = None
        if self.transport.is_closing():
            return
        if self._is_idle:  # kept alive for nothing: closed, as uvicorn does
            self.transport.close()
            return
        if self._awaits_headers and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def deadline_protocol(header_timeout_s: float, body_timeout_s: float) -> type[DeadlineProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, with these deadlines."""
    interval_s = min(1.0, header_timeout_s / 4, body_timeout_s / 4)
    return type(
        "DeadlineProtocol",
        (DeadlineProtocol,),
        {
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
            "watch": DeadlineWatch(interval_s),
        },
    )
