"""The read deadlines of one loop's upstream connections, kept by one timer.

`asyncio.timeout` arms a loop timer when it is entered and cancels it when left: on an event loop
that idled between calls (25 calls/s) that costs ~55 µs of CPU each time, and a streamed call
waited under three of them. Here a wait only writes its connection's deadline; the one timer is
armed for the earliest deadline, re-armed only when a new one comes sooner, and when it fires it
expires the connections past theirs and re-arms for the next. A call that ends first leaves the
timer armed: it fires once, finds that connection done, and moves on (about one wake-up per
timeout's length while calls come and go).
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

_TIMER_SLACK_S = 0.001  # the loop's timers keep milliseconds: one may fire this much early


class Expiring(Protocol):
    """A connection whose waits a `Deadlines` bounds."""

    @property
    def deadline(self) -> float | None: ...  # loop time; None: not waiting under a deadline

    def expire(self) -> None: ...  # its deadline passed: fail what waits on it


class Deadlines:
    """The deadlines of the connections of one loop (see the module's note)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._watched: set[Expiring] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def time(self) -> float:
        return self._loop.time()

    def watch(self, conn: Expiring, when: float) -> None:
        """`conn` now has a deadline at `when` (its `deadline`), checked once it is due."""
        self._watched.add(conn)
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = self._loop.call_at(when, self._fire), when

    def forget(self, conn: Expiring) -> None:
        """`conn`'s exchange is over: it waits under no deadline until its next one."""
        self._watched.discard(conn)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time()
        earliest = math.inf
        for conn in list(self._watched):
            deadline = conn.deadline
            if deadline is None:
                self._watched.discard(conn)
            elif deadline <= now + _TIMER_SLACK_S:
                self._watched.discard(conn)
                conn.expire()
            else:
                earliest = min(earliest, deadline)
        if earliest < math.inf:
            self._timer, self._timer_at = self._loop.call_at(earliest, self._fire), earliest
