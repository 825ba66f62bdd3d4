"""Bookkeeping a call owes once its reply is out: ledger row, metrics, span, cache reconcile.

Queued by the pipeline and run on the event loop's next turn, in one batch. The handler's task
writes the response without yielding (uvicorn's send only waits when the socket is full), so the
batch runs after the reply's bytes are in the kernel: none of it is on the client's critical path.
Quota settles are not deferred: a sequential client must never see its own last call in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("lantern.after_reply")


class AfterReply:
    """`add(fn, *args)` queues one piece of work; each runs exactly once. `immediate=True` is
    the reference path (run inside `add`); `flush()` runs what is queued now (shutdown, tests)."""

    def __init__(self, *, immediate: bool = False) -> None:
        self._immediate = immediate
        self._queue: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def add(self, fn: Callable[..., None], *args: Any) -> None:
        if self._immediate:
            _run(fn, args)
            return
        self._queue.append((fn, args))
        if len(self._queue) == 1:  # the first since the last flush schedules the next one
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no running loop: nothing would ever flush, run it now
                self.flush()

    def flush(self) -> None:
        queue, self._queue = self._queue, []
        for fn, args in queue:
            _run(fn, args)

    @property
    def num_pending(self) -> int:
        return len(self._queue)


def _run(fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    try:
        fn(*args)
    except Exception:  # one broken record must not drop the rest of the batch
        log.exception("after-reply bookkeeping failed")
