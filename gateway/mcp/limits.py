"""A tenant's MCP tool calls per minute and at once (`limits.tool_calls_per_minute`,
`limits.concurrent_tool_calls`), counted in this gateway process.

A refused call has not started: the client may retry it after the hint.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from gateway.mcp.errors import ToolCallsLimited
from policies.limits import LimitsPolicy

WINDOW_S = 60.0


class ToolCallLimiter:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._started: dict[str, deque[float]] = {}
        self._running: dict[str, int] = {}

    @asynccontextmanager
    async def slot(self, tenant: str, limits: LimitsPolicy) -> AsyncIterator[None]:
        """Held for the duration of one call; raises `ToolCallsLimited` before it starts."""
        self._admit(tenant, limits)
        self._running[tenant] = self._running.get(tenant, 0) + 1
        try:
            yield
        finally:
            self._running[tenant] -= 1

    def _admit(self, tenant: str, limits: LimitsPolicy) -> None:
        cap = limits.concurrent_tool_calls
        if cap is not None and self._running.get(tenant, 0) >= cap:
            raise ToolCallsLimited("limits.concurrent_tool_calls", 1)
        per_minute = limits.tool_calls_per_minute
        if per_minute is None:
            return
        now = self._clock()
        started = self._started.setdefault(tenant, deque())
        while started and started[0] <= now - WINDOW_S:
            started.popleft()
        if len(started) >= per_minute:
            wait_s = max(1, math.ceil(started[0] + WINDOW_S - now))
            raise ToolCallsLimited("limits.tool_calls_per_minute", wait_s)
        started.append(now)
