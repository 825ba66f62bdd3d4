"""Store writes that outlive the request that started them: a streamed turn is stored as its
response completes, and a client that hangs up right then must not cancel the write of a
response it was billed for and whose id it already holds. Owns which writes run detached and
how many per tenant; never what is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from functools import partial
from typing import Any

log = logging.getLogger("lantern.responses")

WRITES_PER_TENANT = 32  # a tenant's store writes running past their requests at once


class StoreWrites:
    """Runs each write as a task of its own that the caller's cancellation does not reach, and
    waits for it, so a caller that stays sees the write done (as before) and one that goes
    leaves it running. At most `per_tenant` such tasks per tenant: past that a write runs in
    its caller, cancelled with it (that tenant's flood loses its own writes, nobody else's). A
    tenant's entry lives while it has a write running. A stopping gateway waits for them
    (`drain`) before its stores close; one still running after that is cancelled by the loop's
    shutdown, and logged."""

    def __init__(self, per_tenant: int = WRITES_PER_TENANT) -> None:
        self._per_tenant = per_tenant
        self._running: dict[str, set[asyncio.Task[None]]] = {}

    async def run(self, tenant: str, response_id: str, write: Coroutine[Any, Any, None]) -> None:
        running = self._running.setdefault(tenant, set())
        if len(running) >= self._per_tenant:
            await write
            return
        task = asyncio.create_task(_logged(response_id, write))
        running.add(task)
        task.add_done_callback(partial(self._finished, tenant))
        await asyncio.shield(task)

    def __len__(self) -> int:
        """Tenants with a write running."""
        return len(self._running)

    async def drain(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for the writes still running (a stopping gateway's, before
        its stores close); returns how many were left unfinished."""
        running = [task for tasks in self._running.values() for task in tasks]
        if not running:
            return 0
        _, pending = await asyncio.wait(running, timeout=timeout_s)
        return len(pending)

    def _finished(self, tenant: str, task: asyncio.Task[None]) -> None:
        running = self._running[tenant]
        running.discard(task)
        if not running:
            del self._running[tenant]


async def _logged(response_id: str, write: Coroutine[Any, Any, None]) -> None:
    try:
        await write
    except asyncio.CancelledError:
        log.warning("response %s not stored: the process stopped while it was written", response_id)
        raise
