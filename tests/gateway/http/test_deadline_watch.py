"""gateway/http/server.py's DeadlineWatch: one timer sweeps a server's connections, closes those
past their deadline and none other, stops while no connection is open and starts again with the
next one (a real event loop, connections standing in for the protocol)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.http.server import DeadlineWatch, deadline_protocol


@dataclass(eq=False)
class Connection:
    loop: asyncio.AbstractEventLoop
    due: float | None
    expired: list[float] = field(default_factory=list)

    def expire(self) -> None:
        self.due = None
        self.expired.append(self.loop.time())


def test_a_late_connection_is_expired_and_an_awaited_one_is_not() -> None:
    async def scenario() -> tuple[Connection, Connection, Connection]:
        loop = asyncio.get_running_loop()
        watch = DeadlineWatch(0.02)
        late = Connection(loop, loop.time() + 0.05)
        waiting = Connection(loop, loop.time() + 60.0)
        idle = Connection(loop, None)  # between requests: no part awaited
        for c in (late, waiting, idle):
            watch.add(c)
        await asyncio.sleep(0.2)
        return late, waiting, idle

    late, waiting, idle = asyncio.run(scenario())
    assert len(late.expired) == 1  # once, at its deadline (within a sweep interval)
    assert waiting.expired == [] and idle.expired == []


def test_the_sweep_stops_with_the_last_connection_and_restarts_with_the_next() -> None:
    async def scenario() -> tuple[bool, bool, Connection]:
        loop = asyncio.get_running_loop()
        watch = DeadlineWatch(0.02)
        first = Connection(loop, None)
        watch.add(first)
        watch.discard(first)
        await asyncio.sleep(0.06)  # the next sweep finds nobody and arms no further timer
        stopped = watch._timer is None
        second = Connection(loop, loop.time() + 0.03)
        watch.add(second)
        restarted = watch._timer is not None
        await asyncio.sleep(0.15)
        return stopped, restarted, second

    stopped, restarted, second = asyncio.run(scenario())
    assert stopped and restarted
    assert len(second.expired) == 1


def test_each_server_gets_its_deadlines_and_a_watch_of_its_own() -> None:
    fast, slow = deadline_protocol(1.0, 2.0), deadline_protocol(10.0, 60.0)
    assert (fast.header_timeout_s, fast.body_timeout_s) == (1.0, 2.0)
    assert fast.watch is not slow.watch
    assert fast.watch.interval_s == 0.25  # a quarter of the shorter deadline
    assert slow.watch.interval_s == 1.0
