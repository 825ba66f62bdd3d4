"""A tenant's MCP tool-call limits (`limits.tool_calls_per_minute`, `concurrent_tool_calls`) and
its `calls_per_session`, counted in the quota store the model doors use: Redis when `redis_url`
is set (shared by every gateway process, and a session's model calls count on the same
counter), this process otherwise.

A refused call has not started: the client may retry it after the hint.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from gateway.mcp.errors import ToolCallsLimited, ToolLimitsUnavailable
from policies.limits import LimitsPolicy
from quotas.errors import QuotaExceeded, QuotaStoreUnavailable
from quotas.limits import ToolCallLimits
from quotas.store import QuotaStore


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
        try:
            lease = await self._store.admit_tool_call(
                tenant,
                limits,
                call_id=uuid.uuid4().hex,
                session_id=session_id or None,
                now_ms=self._now_ms(),
            )
        except QuotaExceeded as exc:
            raise ToolCallsLimited(f"limits.{exc.limit}", exc.retry_after_s) from exc
        except QuotaStoreUnavailable as exc:
            raise ToolLimitsUnavailable() from exc
        try:
            yield
        finally:
            await self._store.end_tool_call(lease, now_ms=self._now_ms())

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)
