"""Store writes outlive callers that are cancelled, a tenant's own bound of them at a time: past
it a flooding tenant's write is cancelled with its caller, another tenant's still runs detached,
and the table empties behind them."""

from __future__ import annotations

import asyncio

import pytest

from gateway.responses.store_writes import StoreWrites


def test_writes_outlive_their_callers_up_to_the_tenants_own_bound() -> None:
    writes = StoreWrites(per_tenant=2)
    release = asyncio.Event()
    done: list[str] = []

    async def write(name: str) -> None:
        await release.wait()
        done.append(name)

    async def run() -> tuple[int, int]:
        callers = [
            asyncio.create_task(writes.run(tenant, name, write(name)))
            for tenant, name in [("acme", "a1"), ("acme", "a2"), ("acme", "a3"), ("globex", "g1")]
        ]
        await asyncio.sleep(0)
        in_flight = len(writes)
        for caller in callers:  # every client hangs up mid-write
            caller.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        release.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return in_flight, len(writes)

    assert asyncio.run(run()) == (2, 0)
    # acme's third write was past its bound: cancelled with its caller; globex's was not
    assert sorted(done) == ["a1", "a2", "g1"]


def test_a_caller_that_stays_sees_its_write_done() -> None:
    writes = StoreWrites()
    done: list[str] = []

    async def write() -> None:
        await asyncio.sleep(0)
        done.append("r1")

    async def run() -> list[str]:
        await writes.run("acme", "r1", write())
        return list(done)

    assert asyncio.run(run()) == ["r1"]


def test_a_write_still_running_when_the_loop_stops_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writes = StoreWrites()

    async def write() -> None:
        await asyncio.Event().wait()  # a store that never answers

    async def run() -> None:
        caller = asyncio.create_task(writes.run("acme", "resp_r1", write()))
        await asyncio.sleep(0)
        caller.cancel()  # the client left; the loop then stops with the write running
        await asyncio.gather(caller, return_exceptions=True)

    with caplog.at_level("WARNING", logger="lantern.responses"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [
        "response resp_r1 not stored: the process stopped while it was written"
    ]


def test_a_stopping_gateway_waits_for_the_writes_still_running() -> None:
    """`drain` lets a detached write (its client gone) finish before the stores close; one that
    does not finish in time is counted, left to the loop's shutdown."""
    writes = StoreWrites()
    done: list[str] = []

    async def write(name: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        done.append(name)

    async def run() -> tuple[int, int, list[str]]:
        callers = [
            asyncio.create_task(writes.run("acme", "quick", write("quick", 0.05))),
            asyncio.create_task(writes.run("acme", "slow", write("slow", 30.0))),
        ]
        await asyncio.sleep(0)
        for caller in callers:  # both clients hang up
            caller.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        left = await writes.drain(1.0)
        idle = await StoreWrites().drain(1.0)
        return left, idle, list(done)

    assert asyncio.run(run()) == (1, 0, ["quick"])
