"""gateway/mcp/limits.py when the caller is cancelled (the client went away): a tool slot whose
admission was on the wire, or whose release was, comes back to the tenant at once instead of
after the lease (900 s), against the real Redis store."""

from __future__ import annotations

import asyncio

import pytest

from gateway.mcp.errors import ToolCallsLimited
from gateway.mcp.limits import ToolCallLimiter
from policies.limits import LimitsPolicy
from quotas.limits import ToolCallLease, ToolCallLimits
from quotas.redis_store import RedisQuotaStore
from tests.quotas.conftest import delete_prefix

ONE_AT_A_TIME = LimitsPolicy(concurrent_tool_calls=1)
T0_S = 1_800_000_000.0


class GatedRedis(RedisQuotaStore):
    """Real Redis whose admission answers, or whose release starts, only once the test opens
    its gate: the round trip is on its way when the caller is cancelled."""

    admit_gate: asyncio.Event
    end_gate: asyncio.Event
    admitted: asyncio.Event
    ending: asyncio.Event

    @classmethod
    def gated(cls, url: str, prefix: str) -> GatedRedis:
        self = cls.from_url(url, key_prefix=prefix)
        assert isinstance(self, GatedRedis)
        self.admit_gate, self.end_gate = asyncio.Event(), asyncio.Event()
        self.admitted, self.ending = asyncio.Event(), asyncio.Event()
        self.admit_gate.set()
        self.end_gate.set()
        return self

    async def admit_tool_call(
        self,
        tenant: str,
        limits: ToolCallLimits,
        *,
        call_id: str,
        session_id: str | None,
        now_ms: int,
    ) -> ToolCallLease:
        lease = await super().admit_tool_call(
            tenant, limits, call_id=call_id, session_id=session_id, now_ms=now_ms
        )
        self.admitted.set()  # the script ran: the slot is held in Redis
        await self.admit_gate.wait()
        return lease

    async def end_tool_call(self, lease: ToolCallLease, *, now_ms: int) -> None:
        self.ending.set()
        await self.end_gate.wait()
        await super().end_tool_call(lease, now_ms=now_ms)


async def _slot_is_free(limiter: ToolCallLimiter, tenant: str) -> bool:
    try:
        async with limiter.slot(tenant, ONE_AT_A_TIME, None):
            return True
    except ToolCallsLimited:
        return False


@pytest.mark.redis
def test_a_caller_cancelled_while_its_admission_is_on_the_wire_frees_the_slot(
    redis_url: str, redis_prefix: str
) -> None:
    async def main() -> None:
        store = GatedRedis.gated(redis_url, redis_prefix)
        limiter = ToolCallLimiter(store, lambda: T0_S)
        store.admit_gate.clear()

        async def call() -> None:
            async with limiter.slot("acme", ONE_AT_A_TIME, None):
                await asyncio.Event().wait()  # never reached: the slot was never handed over

        caller = asyncio.ensure_future(call())
        await store.admitted.wait()
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()
        store.admit_gate.set()  # Redis' answer lands after its caller left
        for _ in range(10):
            await asyncio.sleep(0)
        await limiter.aclose()
        assert await _slot_is_free(limiter, "acme")
        assert await _slot_is_free(limiter, "globex")
        await store.close()

    try:
        asyncio.run(main())
    finally:
        delete_prefix(redis_url, redis_prefix)


@pytest.mark.redis
def test_a_caller_cancelled_while_its_slot_is_given_back_still_frees_it(
    redis_url: str, redis_prefix: str
) -> None:
    async def main() -> None:
        store = GatedRedis.gated(redis_url, redis_prefix)
        limiter = ToolCallLimiter(store, lambda: T0_S)
        store.end_gate.clear()

        async def call() -> None:
            async with limiter.slot("acme", ONE_AT_A_TIME, None):
                pass  # the tool ran; the slot's release is next

        caller = asyncio.ensure_future(call())
        await store.ending.wait()
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()
        store.end_gate.set()
        await limiter.aclose()
        assert await _slot_is_free(limiter, "acme")
        await store.close()

    try:
        asyncio.run(main())
    finally:
        delete_prefix(redis_url, redis_prefix)
