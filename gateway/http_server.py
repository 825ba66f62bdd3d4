"""uvicorn's `Server` with a once-a-second tick: what `lantern serve` runs the app on.

Owns only the server's wake-ups; no request handling, no settings.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

DATE_EVERY_TICKS = 10  # uvicorn's `on_tick` refreshes the Date header when `counter % 10 == 0`


class TickServer(uvicorn.Server):
    """Ticks every `tick_s` (1 s) instead of uvicorn's 0.1 s. A tick only refreshes the `Date`
    header (once a second either way) and looks for an exit request; ten wake-ups a second were
    most of an idle gateway's CPU. An exit signal ends the wait at once, so shutting down is as
    prompt as before; an exit asked by setting `should_exit` alone is seen at the next tick."""

    def __init__(self, config: uvicorn.Config, *, tick_s: float = 1.0) -> None:
        super().__init__(config)
        self.tick_s = tick_s
        self.num_ticks = 0
        self._exit_asked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
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
