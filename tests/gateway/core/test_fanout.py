"""The fan-out gate: one call leads a prefix write, the others wait for its first byte; bounded per
tenant and in time, and it holds nothing once no call is leading."""

from __future__ import annotations

import asyncio

from gateway.core.fanout import FanoutGate

KEY = ("acme", "lt-head", "claude-api\0")


def test_waiters_go_when_the_lead_releases_and_nothing_is_held() -> None:
    async def main() -> tuple[list[str], int]:
        gate = FanoutGate()
        order: list[str] = []
        lead, _ = await gate.turn(KEY, can_lead=True)
        assert lead is not None

        async def wait(name: str) -> None:
            assert (await gate.turn(KEY, can_lead=True))[0] is None
            order.append(name)

        waiters = [asyncio.create_task(wait(n)) for n in ("b", "c")]
        await asyncio.sleep(0.01)
        order.append("first byte")
        lead.release()
        lead.release()  # idempotent
        await asyncio.gather(*waiters)
        return order, len(gate)

    order, held = asyncio.run(main())
    assert order == ["first byte", "b", "c"]
    assert held == 0


def test_a_call_that_cannot_lead_and_tenants_past_their_bound_do_not_wait() -> None:
    async def main() -> list[object]:
        gate = FanoutGate(max_leads_per_tenant=1)
        not_streamed = await gate.turn(KEY, can_lead=False)
        first, _ = await gate.turn(KEY, can_lead=True)
        other_prefix = await gate.turn(("acme", "lt-other", "claude-api\0"), can_lead=True)
        other_tenant, _ = await gate.turn(("globex", "lt-head", "claude-api\0"), can_lead=True)
        assert first is not None and other_tenant is not None
        first.release()
        other_tenant.release()
        return [not_streamed, other_prefix, len(gate)]

    assert asyncio.run(main()) == [(None, None), (None, None), 0]


def test_a_waiter_waits_at_most_max_wait_s() -> None:
    async def main() -> int:
        gate = FanoutGate(max_wait_s=0.01)
        lead, _ = await gate.turn(KEY, can_lead=True)
        waiter, waited_s = await gate.turn(KEY, can_lead=True)  # no first byte ever came
        assert waiter is None and waited_s is not None and waited_s >= 0.01
        assert lead is not None
        lead.release()
        return gate.num_waited

    assert asyncio.run(main()) == 1
