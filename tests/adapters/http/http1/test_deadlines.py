"""Deadlines: one timer for the waits of all connections of a loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapters.http.http1.deadlines import Deadlines


class Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    """The two loop methods `Deadlines` uses, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        self.timers.append(Timer(when, callback))
        return self.timers[-1]

    def run_until(self, now: float) -> None:
        self.now = now
        for timer in list(self.timers):
            if not timer.cancelled and timer.when <= now:
                timer.cancelled = True
                timer.callback()

    @property
    def armed(self) -> list[float]:
        return [t.when for t in self.timers if not t.cancelled]


class Conn:
    def __init__(self) -> None:
        self.deadline: float | None = None
        self.num_expired = 0

    def expire(self) -> None:
        self.num_expired += 1


def watched(deadlines: Deadlines, conn: Conn, when: float) -> Conn:
    conn.deadline = when
    deadlines.watch(conn, when)
    return conn


def test_calls_with_later_deadlines_arm_no_timer_of_their_own() -> None:
    loop = ManualLoop()
    deadlines = Deadlines(loop)  # type: ignore[arg-type]
    first = watched(deadlines, Conn(), 160.0)
    for n in range(100):  # a call every 10 ms, each with a 60 s deadline, each done at once
        loop.now = 100.0 + n / 100
        conn = watched(deadlines, Conn(), loop.now + 60)
        conn.deadline = None
        deadlines.forget(conn)
    assert len(loop.timers) == 1 and loop.armed == [160.0]
    assert first.num_expired == 0


def test_a_sooner_deadline_re_arms_and_only_waits_past_theirs_expire() -> None:
    loop = ManualLoop()
    deadlines = Deadlines(loop)  # type: ignore[arg-type]
    slow = watched(deadlines, Conn(), 160.0)
    soon = watched(deadlines, Conn(), 100.2)
    assert loop.armed == [100.2]
    done = watched(deadlines, Conn(), 100.1)
    done.deadline = None  # its exchange ended before the timer fired
    loop.run_until(100.1)
    loop.run_until(100.2)
    assert (soon.num_expired, slow.num_expired, done.num_expired) == (1, 0, 0)
    assert loop.armed == [160.0]  # the next one due
    slow.deadline = 170.0  # a wait under way moved it on: the timer at 160 finds it not due
    loop.run_until(160.0)
    assert slow.num_expired == 0 and loop.armed == [170.0]
    loop.run_until(170.0)
    assert slow.num_expired == 1 and loop.armed == []


def test_an_exchange_that_ended_is_not_held() -> None:
    loop = ManualLoop()
    deadlines = Deadlines(loop)  # type: ignore[arg-type]
    conn = watched(deadlines, Conn(), 130.0)
    conn.deadline = None
    deadlines.forget(conn)
    loop.run_until(130.0)
    assert conn.num_expired == 0 and loop.armed == []
    held: Any = deadlines
    assert not held._watched
