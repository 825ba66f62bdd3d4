"""The Redis quota store: the same semantics as `quotas.memory`, shared by many gateway processes.

Owns key naming, argument encoding and the mapping of Redis failures to `QuotaStoreUnavailable`.
Each operation is one atomic Lua script (`quotas.lua`); it must not read time on its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from typing import Literal, TypeVar

from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from quotas import lua
from quotas.errors import (
    QuotaExceeded,
    QuotaStoreUnavailable,
    ReservationConflict,
    SpendNotSeeded,
    check_never_fits,
)
from quotas.limits import (
    CONCURRENCY_RETRY_MS,
    Actual,
    Ask,
    LimitName,
    Limits,
    Reservation,
    Settlement,
    SettleStatus,
    ToolCallLease,
    ToolCallLimits,
    UsageSnapshot,
    WindowUse,
    budget_period,
    micro_to_usd,
)
from quotas.memory import MAX_SESSIONS_PER_TENANT

T = TypeVar("T")
# Unreachable, or reachable but refusing to run the script: a replica (READONLY), at maxmemory
# (OOM), unable to persist (MISCONF), busy with another script (BUSY). Either way the store
# cannot answer, and each tenant fails open or closed as its policy says.
_DOWN = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ResponseError,
    OSError,
)
# Tenant keys live while the tenant's month matters; their content is pruned by the scripts.
_KEEP_AFTER_PERIOD_MS = 35 * 86_400_000
_SESSION_KEEP_MS = 60_000
_MAX_SESSION_KEY_CHARS = 128


class RedisQuotaStore:
    """Quotas in one Redis (or one cluster slot per tenant), atomic across processes."""

    name: Literal["redis"] = "redis"
    settles_inline: bool = False  # a round trip to Redis

    def __init__(
        self,
        client: Redis,
        *,
        key_prefix: str = "lantern:quota:",
        requires_seeded_spend: bool = False,
        max_sessions_per_tenant: int = MAX_SESSIONS_PER_TENANT,
    ) -> None:
        """`requires_seeded_spend`: refuse to admit against a budget whose month no
        `seed_spend` marked (`SpendNotSeeded`): a Redis that lost its data (restarted without
        persistence, flushed, evicted) must not count the month's spend from zero.
        `max_sessions_per_tenant`: live session counts one tenant keeps in Redis; past it the
        tenant's sessions that would expire soonest are forgotten (as in `quotas.memory`)."""
        self._client = client
        self._prefix = key_prefix
        self._requires_seed = requires_seeded_spend
        self._max_sessions = max_sessions_per_tenant
        self._reserve = client.register_script(lua.RESERVE)
        self._settle = client.register_script(lua.SETTLE)
        self._usage = client.register_script(lua.USAGE)
        self._seed = client.register_script(lua.SEED_SPEND)
        self._tool_admit = client.register_script(lua.TOOL_ADMIT)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key_prefix: str = "lantern:quota:",
        timeout_s: float = 5.0,
        max_connections: int = 64,
        requires_seeded_spend: bool = False,
        max_sessions_per_tenant: int = MAX_SESSIONS_PER_TENANT,
    ) -> RedisQuotaStore:
        """A bounded pool (calls wait up to `timeout_s` for a connection rather than opening
        hundreds at once). A command that meets a connection error (a pooled connection that
        went stale when Redis restarted: reset, or closed by the server) is sent once more on a
        fresh connection; a timeout is never retried (the command may have run). A retry cannot
        apply twice: a reserve's id is refused as `dup`, a second settle is a `duplicate`."""
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis_errors.ConnectionError,)),
            retry_on_error=[],
            decode_responses=True,
        )
        client = Redis(connection_pool=pool)
        return cls(
            client,
            key_prefix=key_prefix,
            requires_seeded_spend=requires_seeded_spend,
            max_sessions_per_tenant=max_sessions_per_tenant,
        )

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        check_never_fits(limits, ask)
        period, period_end_ms = budget_period(now_ms)
        has_session = limits.calls_per_session is not None and ask.session_id is not None
        args: list[str | int] = [
            reservation_id,
            now_ms,
            ask.tokens,
            ask.cost_micro_usd,
            period,
            period_end_ms,
            limits.window_ms,
            limits.lease_ms,
            _or_none(limits.tokens_per_minute),
            _or_none(limits.requests_per_minute),
            _or_none(limits.concurrent_requests),
            _or_none(limits.calls_per_session),
            _or_none(limits.budget_micro_usd),
            limits.session_ttl_ms,
            1 if has_session else 0,
            _gc_ms(now_ms, period_end_ms),
            limits.session_ttl_ms + _SESSION_KEEP_MS,
            CONCURRENCY_RETRY_MS,
            1 if self._requires_seed else 0,
            self._max_sessions,
        ]
        keys = [
            *self._tenant_keys(tenant),
            self._session_key(tenant, ask.session_id),
            self._sessions_key(tenant),
        ]
        reply = await self._call(self._reserve(keys=keys, args=args))
        if reply[0] == "dup":
            raise ReservationConflict(reservation_id)
        if reply[0] == "unseeded":
            raise SpendNotSeeded(tenant, period)
        if reply[0] == "over":
            raise _exceeded(reply, limits)
        now, tokens_used, requests_used, reset_ms = (int(x) for x in reply[1:5])
        return Reservation(
            id=reservation_id,
            tenant=tenant,
            tokens=ask.tokens,
            cost_micro_usd=ask.cost_micro_usd,
            period=period,
            admitted_ms=now,
            lease_expiry_ms=now + limits.lease_ms,
            store=self.name,
            window=_window(limits, tokens_used, requests_used, reset_ms),
            session_id=ask.session_id if has_session else None,
        )

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        session = reservation.session_id
        args: list[str | int] = [
            reservation.id,
            actual.tokens,
            actual.cost_micro_usd,
            reservation.period,
            "" if session is None else reservation.admitted_ms,
        ]
        keys = [
            *self._tenant_keys(reservation.tenant),
            self._session_key(reservation.tenant, session),
        ]
        reply = await self._call(self._settle(keys=keys, args=args))
        status: SettleStatus = reply[0]
        return Settlement(status, int(reply[1]), micro_to_usd(int(reply[2])))

    async def seed_spend(
        self, tenant: str, period: str, spend_micro_usd: int, *, now_ms: int
    ) -> None:
        _, period_end_ms = budget_period(now_ms)
        budget_key = self._tenant_keys(tenant)[5]
        args: list[str | int] = [period, spend_micro_usd, _gc_ms(now_ms, period_end_ms)]
        await self._call(self._seed(keys=[budget_key], args=args))

    async def usage(
        self, tenant: str, limits: Limits, *, now_ms: int, session_id: str | None = None
    ) -> UsageSnapshot:
        period, period_end_ms = budget_period(now_ms)
        keys = [*self._tenant_keys(tenant), self._session_key(tenant, session_id)]
        args: list[str | int] = [
            now_ms,
            limits.window_ms,
            period,
            1 if session_id else 0,
            _gc_ms(now_ms, period_end_ms),
        ]
        reply = [int(x) for x in await self._call(self._usage(keys=keys, args=args))]
        return UsageSnapshot(
            now_ms=reply[0],
            tokens_used=reply[1],
            requests_used=reply[2],
            concurrent=reply[3],
            reset_ms=reply[4],
            period=period,
            spend_micro_usd=reply[5],
            held_micro_usd=reply[6],
            session_calls=reply[7],
        )

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        _, period_end_ms = budget_period(now_ms)
        has_session = limits.calls_per_session is not None and session_id is not None
        args: list[str | int] = [
            call_id,
            now_ms,
            limits.window_ms,
            limits.lease_ms,
            _or_none(limits.per_minute),
            _or_none(limits.concurrent),
            _or_none(limits.calls_per_session),
            limits.session_ttl_ms,
            1 if has_session else 0,
            _gc_ms(now_ms, period_end_ms),
            limits.session_ttl_ms + _SESSION_KEEP_MS,
            CONCURRENCY_RETRY_MS,
            self._max_sessions,
        ]
        keys = [
            *self._tool_keys(tenant),
            self._session_key(tenant, session_id),
            self._sessions_key(tenant),
        ]
        reply = await self._call(self._tool_admit(keys=keys, args=args))
        if reply[0] == "over":
            limit: LimitName = reply[1]
            raise QuotaExceeded(limit, int(reply[2]), int(reply[3]), int(reply[4]))
        return ToolCallLease(call_id, tenant, self.name)

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        await self._call(self._client.zrem(self._tool_keys(lease.tenant)[2], lease.id))

    async def ping(self) -> None:
        await self._call(self._client.ping())

    async def close(self) -> None:
        await self._client.aclose(close_connection_pool=True)

    def _tenant_keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}{{{tenant}}}:"
        return [base + part for part in ("meta", "win", "wtok", "active", "res", "budget")]

    def _tool_keys(self, tenant: str) -> list[str]:
        base = f"{self._prefix}{{{tenant}}}:"
        return [base + part for part in ("meta", "tools:win", "tools:active")]

    def _session_key(self, tenant: str, session_id: str | None) -> str:
        sid = session_id or ""
        if len(sid) > _MAX_SESSION_KEY_CHARS:
            sid = "sha256:" + hashlib.sha256(sid.encode()).hexdigest()
        return f"{self._prefix}{{{tenant}}}:sess:{sid}"

    def _sessions_key(self, tenant: str) -> str:
        return f"{self._prefix}{{{tenant}}}:sessions"

    async def _call(self, pending: Awaitable[T]) -> T:
        try:
            return await pending
        except _DOWN as exc:
            raise QuotaStoreUnavailable("redis", type(exc).__name__) from exc


def _or_none(value: int | None) -> int:
    return -1 if value is None else value


def _gc_ms(now_ms: int, period_end_ms: int) -> int:
    return max(period_end_ms - now_ms, 0) + _KEEP_AFTER_PERIOD_MS


def _window(limits: Limits, tokens_used: int, requests_used: int, reset_ms: int) -> WindowUse:
    return WindowUse(
        tokens_used,
        requests_used,
        reset_ms,
        limits.tokens_per_minute,
        limits.requests_per_minute,
    )


def _exceeded(reply: list[str | int], limits: Limits) -> QuotaExceeded:
    limit: LimitName = reply[1]  # type: ignore[assignment]
    value, current, retry_ms = int(reply[2]), int(reply[3]), int(reply[4])
    window = _window(limits, int(reply[5]), int(reply[6]), int(reply[7]))
    if limit == "monthly_budget_usd":
        return QuotaExceeded(limit, micro_to_usd(value), micro_to_usd(current), retry_ms, window)
    return QuotaExceeded(limit, value, current, retry_ms, window)
