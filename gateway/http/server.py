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


class DeadlineProtocol(HttpToolsProtocol):
    """httptools' protocol with two read deadlines (uvicorn has neither): a request's headers
    must be complete within `header_timeout_s` of the connection opening or of the request's
    first byte, and its body within `body_timeout_s` of the headers. Past one, the connection
    is closed (after a 408 when no response has started), so a client that sends a few bytes
    and stalls cannot hold a connection, a task or a buffer for ever. Subclasses set both
    (see `deadline_protocol`)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, headers_pending=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:
            self._arm(self.header_timeout_s, headers_pending=True)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._arm(self.body_timeout_s, headers_pending=False)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self, delay_s: float, *, headers_pending: bool) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay_s, self._expire, headers_pending)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, headers_pending: bool) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if headers_pending and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def deadline_protocol(header_timeout_s: float, body_timeout_s: float) -> type[DeadlineProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, with these deadlines."""
    return type(
        "DeadlineProtocol",
        (DeadlineProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )
