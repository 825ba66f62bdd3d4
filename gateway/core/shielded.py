"""A store call that takes something (a quota hold, a tool slot) and may suspend on the network:
a caller cancelled while the answer is on its way (its client went away) would otherwise leave
what was taken to its lease. Shared by the model doors' admission and the MCP door's slots."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


async def taken_or_given_back(taking: Coroutine[Any, Any, T], give_back: Callable[[T], None]) -> T:
    """Await `taking` in a task of its own; if the caller is cancelled first, what it took is
    handed to `give_back` once the store answers (a refusal or an outage took nothing)."""
    pending = asyncio.ensure_future(taking)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        pending.add_done_callback(partial(_if_taken, give_back))
        raise


def _if_taken(give_back: Callable[[T], None], taken: asyncio.Future[T]) -> None:
    if not taken.cancelled() and taken.exception() is None:
        give_back(taken.result())
