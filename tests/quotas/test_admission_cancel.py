"""gateway/core/admission.py when its caller is cancelled: a settle on its way still lands, a
reserve whose answer was on the wire gives its hold back, and the in-process store settles in
one step (no task, no loop turn)."""

from __future__ import annotations

import asyncio

import pytest

from adapters.types import Usage
from gateway.core.admission import Ticket
from quotas.limits import Actual, Ask, Limits, Reservation, Settlement
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from tests.quotas.conftest import delete_prefix
from tests.quotas.test_admission import T0_S, build, tenant, tokens_used


class GatedStore(MemoryQuotaStore):
    """Settles only once the test opens the gate: a Redis round trip in flight."""

    settles_inline = False  # its settle awaits the gate

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def settle(self, reservation: Reservation, actual: Actual, *, now_ms: int) -> Settlement:
        await self.gate.wait()
        return await super().settle(reservation, actual, now_ms=now_ms)


def test_settle_survives_the_caller_being_cancelled() -> None:
    acme = tenant(tokens_per_minute=10_000, concurrent_requests=1)

    async def main() -> None:
        store = GatedStore()
        admission, _, _ = build(store)
        ticket = await admission.reserve(
            acme, session_id=None, prompt_tokens=900, max_output_tokens=1000, worst_case_usd=0.0
        )
        # the client went away mid-stream after 37 output tokens
        caller = asyncio.ensure_future(
            admission.settle(ticket, usage=Usage(900, 37), cost_usd=0.001)
        )
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.sleep(0)
        store.gate.set()
        await asyncio.gather(caller, return_exceptions=True)
        for _ in range(3):
            await asyncio.sleep(0)
        assert caller.cancelled()
        assert await tokens_used(admission, acme) == 937
        again = await admission.reserve(
            acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=0.0
        )
        assert isinstance(again, Ticket)

    asyncio.run(main())


class ReplyInFlight(RedisQuotaStore):
    """Real Redis whose reserve replies only once the test opens the gate: the script has run
    and held the slot, its answer is on the wire."""

    gate: asyncio.Event

    async def reserve(
        self, tenant: str, limits: Limits, ask: Ask, *, reservation_id: str, now_ms: int
    ) -> Reservation:
        held = await super().reserve(
            tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        await self.gate.wait()
        return held


@pytest.mark.redis
def test_a_caller_cancelled_while_its_reservation_is_on_the_wire_frees_the_slot(
    redis_url: str, redis_prefix: str
) -> None:
    """The client went away while Redis' answer to its reserve was on its way: the hold the
    script made is given back, so the tenant's one concurrent slot is free for its next call
    (not held for the 900 s lease) and the abandoned call is charged nothing."""
    acme = tenant(tokens_per_minute=10_000, concurrent_requests=1, monthly_budget_usd=5.0)
    globex = tenant("globex", concurrent_requests=1)

    async def main() -> None:
        store = ReplyInFlight.from_url(redis_url, key_prefix=redis_prefix)
        store.gate = asyncio.Event()
        admission, _, _ = build(store)
        caller = asyncio.ensure_future(
            admission.reserve(
                acme, session_id=None, prompt_tokens=900, max_output_tokens=100, worst_case_usd=1.0
            )
        )
        while not (await store.usage("acme", Limits(), now_ms=int(T0_S * 1000))).concurrent:
            await asyncio.sleep(0)  # the script has run: acme's slot is held in Redis
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()
        store.gate.set()
        for _ in range(10):  # the answer lands, then its give-back is scheduled
            await asyncio.sleep(0)
        await asyncio.gather(*admission._background)
        usage = await store.usage("acme", Limits(), now_ms=int(T0_S * 1000))
        assert (usage.concurrent, usage.tokens_used, usage.held_micro_usd) == (0, 0, 0)
        assert usage.spend_micro_usd == 0
        again = await admission.reserve(
            acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=0.0
        )
        other = await admission.reserve(
            globex, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=0.0
        )
        assert (again.reservation.tenant, other.reservation.tenant) == ("acme", "globex")
        await admission.aclose()

    try:
        asyncio.run(main())
    finally:
        delete_prefix(redis_url, redis_prefix)


def test_in_process_settle_finishes_in_one_step() -> None:
    """The memory store settles inline: `Admission.settle` completes on its first step, with no
    task and no loop turn before the reply (a suspending store goes through the shield, above)."""
    acme = tenant(tokens_per_minute=10_000, concurrent_requests=1)

    async def main() -> None:
        admission, registry, _ = build()
        ticket = await admission.reserve(
            acme, session_id=None, prompt_tokens=900, max_output_tokens=1000, worst_case_usd=1.0
        )
        settling = admission.settle(ticket, usage=Usage(900, 37), cost_usd=0.25)
        with pytest.raises(StopIteration):
            settling.send(None)
        assert not admission._background
        assert await tokens_used(admission, acme) == 937
        assert registry.get_sample_value("lantern_budget_spend_usd", {"tenant": "acme"}) == 0.25
        again = await admission.reserve(  # the concurrency slot is free again
            acme, session_id=None, prompt_tokens=1, max_output_tokens=1, worst_case_usd=0.0
        )
        assert isinstance(again, Ticket)

    asyncio.run(main())
