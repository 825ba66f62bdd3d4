"""The fan-out gate across processes, through the real Redis: two gates stand for two gateway
processes. A call in one leads, calls of both wait for its first byte; a lead that fails lets
them go; a lease that is never given back runs out; another tenant never waits; Redis down,
each gate gates alone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from redis.asyncio import Redis

from gateway.core.fanout import FanoutGate, Lead
from gateway.core.fanout_shared import SharedLeases

KEY = ("acme", "lt-head", "claude-api\0")


def _gate(
    redis_url: str, prefix: str, lease_s: float = 30.0, max_wait_s: float = 30.0
) -> FanoutGate:
    gate = FanoutGate(max_wait_s=max_wait_s)
    gate.shared = SharedLeases(Redis.from_url(redis_url), lease_s, key_prefix=prefix, poll_s=0.005)
    return gate


async def _close(*gates: FanoutGate) -> None:
    for gate in gates:
        while gate._tasks:
            await asyncio.sleep(0.005)
        assert gate.shared is not None
        await gate.shared.aclose()


def test_one_lead_across_two_processes(redis_url: str, redis_prefix: str) -> None:
    async def main() -> tuple[list[str], list[object]]:
        a, b = _gate(redis_url, redis_prefix), _gate(redis_url, redis_prefix)
        order: list[str] = []
        lead, _ = await a.turn(KEY, can_lead=True)
        assert isinstance(lead, Lead) and lead.token is not None

        async def wait(gate: FanoutGate, name: str, can_lead: bool) -> None:
            got, waited_s = await gate.turn(KEY, can_lead)
            assert got is None and waited_s is not None
            order.append(name)

        waiters = [
            asyncio.create_task(wait(b, "b1", True)),
            asyncio.create_task(wait(b, "b2", False)),  # a reply that is not streamed waits too
            asyncio.create_task(wait(a, "a1", True)),
        ]
        await asyncio.sleep(0.05)
        other, _ = await b.turn(("globex", "lt-head", "claude-api\0"), can_lead=True)
        assert other is not None  # another tenant leads its own, at once
        other.release()
        order.append("first byte")
        lead.release()
        await asyncio.gather(*waiters)
        held = [len(a), len(b), await a.shared.holder(KEY)]  # type: ignore[union-attr]
        await _close(a, b)
        return order, held

    order, held = asyncio.run(main())
    assert order[0] == "first byte" and sorted(order[1:]) == ["a1", "b1", "b2"]
    assert held == [0, 0, None]  # nothing held once the lead gave its lease back


def test_a_lead_that_never_gives_its_lease_back_is_waited_for_at_most_its_lease(
    redis_url: str, redis_prefix: str
) -> None:
    async def main() -> tuple[object, float | None]:
        a, b = _gate(redis_url, redis_prefix, lease_s=0.05), _gate(redis_url, redis_prefix)
        lead, _ = await a.turn(KEY, can_lead=True)  # its process dies: never released
        got, waited_s = await b.turn(KEY, can_lead=True)
        assert lead is not None
        lead.token = None  # (a dead process gives nothing back)
        lead.release()
        await _close(a, b)
        return got, waited_s

    got, waited_s = asyncio.run(main())
    assert got is None and waited_s is not None and waited_s >= 0.05


def test_a_waiter_elsewhere_waits_at_most_max_wait_s(redis_url: str, redis_prefix: str) -> None:
    async def main() -> tuple[object, float | None, int]:
        a = _gate(redis_url, redis_prefix)
        b = _gate(redis_url, redis_prefix, max_wait_s=0.02)
        lead, _ = await a.turn(KEY, can_lead=True)
        got, waited_s = await b.turn(KEY, can_lead=True)
        assert lead is not None
        lead.release()
        await _close(a, b)
        return got, waited_s, len(b)

    got, waited_s, held = asyncio.run(main())
    assert got is None and waited_s is not None and waited_s >= 0.02 and held == 0


def test_with_redis_down_each_process_gates_alone(caplog: Any) -> None:
    async def main() -> list[object]:
        gate = FanoutGate()
        down = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2)
        gate.shared = SharedLeases(down, 30.0, key_prefix=f"t-{uuid.uuid4().hex}:")
        lead, _ = await gate.turn(KEY, can_lead=True)  # leads, alone
        assert lead is not None
        waiter = asyncio.create_task(gate.turn(KEY, can_lead=True))  # waits in this process
        await asyncio.sleep(0.01)
        assert not waiter.done()
        lead.release()
        got, waited_s = await waiter
        not_streamed = await gate.turn(("acme", "lt-other", "x"), can_lead=False)
        await _close(gate)
        return [got, waited_s is not None, not_streamed, len(gate)]

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(main()) == [None, True, (None, None), 0]
    assert "gates alone" in caplog.text


def test_a_call_cancelled_while_asking_redis_holds_nothing(
    redis_url: str, redis_prefix: str
) -> None:
    async def main() -> list[object]:
        gate = _gate(redis_url, redis_prefix)
        asking = asyncio.create_task(gate.turn(KEY, can_lead=True))
        await asyncio.sleep(0)  # it made its entry and is asking Redis
        held_while_asking = len(gate)
        asking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asking
        await _close(gate)
        return [held_while_asking, len(gate), gate.num_waited]

    assert asyncio.run(main()) == [1, 0, 0]  # the entry (and its local waiters) let go
