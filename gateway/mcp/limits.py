"""A tenant's MCP tool-call limits (`limits.tool_calls_per_minute`, `concurrent_tool_calls`) and
its `calls_per_session`, counted in the quota store the model doors use: Redis when `redis_url`
is set (shared by every gateway process, and a session's model calls count on the same
counter), this process otherwise.

A refused call has not started: the client may retry it after the hint. A caller cancelled
while the store's answer is on its way (the client went away) gives its slot back once the
store answers, as the model doors' admission does (gateway/core/admission.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from gateway.core.shielded import taken_or_given_back
from gateway.mcp.errors import ToolCallsLimited, ToolLimitsUnavailable
from policies.limits import LimitsPolicy
from quotas.errors import QuotaError, QuotaExceeded, QuotaStoreUnavailable
from quotas.limits import ToolCallLease, ToolCallLimits
from quotas.store import QuotaStore

log = logging.getLogger("lantern.mcp")


def tool_call_limits(policy: LimitsPolicy) -> ToolCallLimits:
    return ToolCallLimits(
        per_minute=policy.tool_calls_per_minute,
        concurrent=policy.concurrent_tool_calls,
        calls_per_session=policy.calls_per_session,
        lease_ms=max(1, round(policy.lease_s * 1000)),
        session_ttl_ms=max(1, round(policy.session_ttl_s * 1000)),
        on_store_down=policy.on_store_down.rates,
    )


class ToolCallLimiter:
    def __init__(self, store: QuotaStore, wall_clock: Callable[[], float]) -> None:
        self._store = store
        self._wall_clock = wall_clock
        self._background: set[asyncio.Future[None]] = set()  # slots given back off the caller

    @asynccontextmanager
    async def slot(
        self, tenant: str, policy: LimitsPolicy, session_id: str | None
    ) -> AsyncIterator[None]:
        """Held for the duration of one call; raises `ToolCallsLimited` before it starts.
        A tenant without tool limits (and no session to count) costs no store round trip."""
        counts_session = policy.calls_per_session is not None and session_id
        if not (policy.tool_calls_per_minute or policy.concurrent_tool_calls or counts_session):
            yield
            return
        limits = tool_call_limits(policy)
        admitting = self._store.admit_tool_call(
            tenant,
            limits,
            call_id=uuid.uuid4().hex,
            session_id=session_id or None,
            now_ms=self._now_ms(),
        )
        try:
            lease = await (admitting if self._store.settles_inline else self._admitted(admitting))
        except QuotaExceeded as exc:
            raise ToolCallsLimited(f"limits.{exc.limit}", exc.retry_after_s) from exc
        except QuotaStoreUnavailable as exc:
            raise ToolLimitsUnavailable() from exc
        try:
            yield
        finally:
            ending = self._store.end_tool_call(lease, now_ms=self._now_ms())
            await (ending if self._store.settles_inline else self._in_background(ending))

    async def aclose(self) -> None:
        """Let the slots being given back reach the store (each bounded by the store's timeout)."""
        if self._background:
            await asyncio.wait(self._background)

    async def _admitted(self, admitting: Coroutine[Any, Any, ToolCallLease]) -> ToolCallLease:
        """An admission that may suspend: a caller cancelled while the store's answer is on its
        way would otherwise leave the slot held for the whole lease; it is given back once the
        store answers."""
        return await taken_or_given_back(admitting, self._give_back)

    def _give_back(self, lease: ToolCallLease) -> None:
        self._track(asyncio.ensure_future(self._store.end_tool_call(lease, now_ms=self._now_ms())))

    async def _in_background(self, ending: Coroutine[Any, Any, None]) -> None:
        """The slot's release in a task of its own: a cancelled caller does not cancel it. A
        release the store cannot take is logged (`_ended`), not the call's error."""
        pending = asyncio.ensure_future(ending)
        self._track(pending)
        with contextlib.suppress(QuotaError):
            await asyncio.shield(pending)

    def _track(self, task: asyncio.Future[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Future[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and isinstance(task.exception(), QuotaError):
            log.error("a tool call's slot could not be given back; its lease will expire")

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)
