"""Real processes against real Redis: a gateway process killed while holding a reservation
(its lease expires and the capacity returns), and Redis stopped and restarted under traffic."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from quotas.errors import QuotaExceeded, QuotaStoreUnavailable
from quotas.failover import FailoverQuotaStore
from quotas.limits import Actual, Ask, Limits
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from tests.quotas.conftest import OwnRedis, delete_prefix

REPO = Path(__file__).resolve().parents[2]
HOLDER = """
import asyncio, json, sys, time
from quotas.limits import Ask, Limits
from quotas.redis_store import RedisQuotaStore

async def main():
    store = RedisQuotaStore.from_url(sys.argv[1], key_prefix=sys.argv[2])
    limits = Limits(tokens_per_minute=1000, concurrent_requests=1, lease_ms=int(sys.argv[3]))
    held = await store.reserve("acme", limits, Ask(400, 0.1), reservation_id="dying",
                               now_ms=int(time.time() * 1000))
    print(json.dumps({"admitted_ms": held.admitted_ms, "expiry_ms": held.lease_expiry_ms}),
          flush=True)
    await asyncio.sleep(3600)  # "streaming" until killed

asyncio.run(main())
"""


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.redis
def test_killed_process_releases_its_slot_when_the_lease_expires(
    redis_url: str, redis_prefix: str
) -> None:
    lease_ms = 1_500
    limits = Limits(tokens_per_minute=1000, concurrent_requests=1, lease_ms=lease_ms)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, redis_url, redis_prefix, str(lease_ms)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        held = json.loads(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL

        async def main() -> None:
            store = RedisQuotaStore.from_url(redis_url, key_prefix=redis_prefix)
            try:
                with pytest.raises(QuotaExceeded) as info:
                    await store.reserve(
                        "acme", limits, Ask(100), reservation_id="a", now_ms=now_ms()
                    )
                assert (info.value.limit, info.value.current) == ("concurrent_requests", 1)
                await asyncio.sleep(max(0.0, (held["expiry_ms"] - now_ms()) / 1000) + 0.05)
                after = await store.reserve(
                    "acme", limits, Ask(100), reservation_id="b", now_ms=now_ms()
                )
                # the dead call's tokens stay counted (conservative) and its hold is spent
                assert after.window.tokens_used == 500
                usage = await store.usage("acme", limits, now_ms=now_ms())
                assert (usage.concurrent, usage.spend_micro_usd, usage.held_micro_usd) == (
                    1,
                    100_000,
                    0,
                )
            finally:
                await store.close()

        asyncio.run(main())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        delete_prefix(redis_url, redis_prefix)


RATES = Limits(tokens_per_minute=10_000_000)  # rates fail open (default)
MONEY = Limits(monthly_budget_usd=1_000.0)  # budgets fail closed (default)


@pytest.mark.redis
def test_redis_stopped_and_restarted_under_traffic(own_redis: OwnRedis) -> None:
    outcomes: Counter[tuple[str, str, str]] = Counter()
    phase = {"name": "before"}

    async def worker(store: FailoverQuotaStore, n: int, stop: asyncio.Event) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            for tenant, limits in (("rates", RATES), ("money", MONEY)):
                try:
                    held = await store.reserve(
                        tenant, limits, Ask(10, 0.01), reservation_id=f"w{n}-{i}", now_ms=now_ms()
                    )
                except QuotaStoreUnavailable:
                    outcomes[(tenant, "unavailable", phase["name"])] += 1
                    continue
                await asyncio.sleep(0.003)
                await store.settle(held, Actual(7, 0.005), now_ms=now_ms())
                outcomes[(tenant, held.store, phase["name"])] += 1

    async def main() -> None:
        shared = RedisQuotaStore.from_url(own_redis.url, timeout_s=0.2)
        local = MemoryQuotaStore()
        store = FailoverQuotaStore(shared, local, probe_interval_ms=100)
        stop = asyncio.Event()
        workers = [asyncio.create_task(worker(store, n, stop)) for n in range(4)]
        await asyncio.sleep(0.5)
        phase["name"] = "outage"
        await asyncio.to_thread(own_redis.stop)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(own_redis.start)
        phase["name"] = "after"
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*workers)
        await asyncio.sleep(0.15)
        # one look at Redis after the probe interval replays every deferred settle
        for tenant, limits in (("rates", RATES), ("money", MONEY)):
            shared_use = await store.usage(tenant, limits, now_ms=now_ms())
            local_use = await local.usage(tenant, limits, now_ms=now_ms())
            results[tenant] = (shared_use, local_use)
        assert store.num_pending_settles == 0
        await store.close()

    results: dict[str, object] = {}
    asyncio.run(main())

    def count(tenant: str, store: str, phase: str | None = None) -> int:
        return sum(
            v
            for (t, s, p), v in outcomes.items()
            if t == tenant and s == store and phase in (None, p)
        )

    # rates fail open: every call was admitted, on the process store only while Redis was away
    assert count("rates", "unavailable") == 0
    assert count("rates", "memory") > 0 and count("rates", "memory", "before") == 0
    assert count("rates", "redis", "before") > 0 and count("rates", "redis", "after") > 0
    # budgets fail closed: refused while Redis was away, never admitted on the process store
    assert count("money", "unavailable", "outage") > 0 and count("money", "memory") == 0
    rates_shared, rates_local = results["rates"]  # type: ignore[misc]
    money_shared, _ = results["money"]  # type: ignore[misc]
    # nothing counted twice: each store holds exactly the settled calls it admitted; a reserve
    # whose reply was lost in the shutdown stays held at its worst case (10 tokens) until its lease
    lost = rates_shared.concurrent
    assert lost <= 4
    assert rates_local.tokens_used == 7 * count("rates", "memory")
    assert rates_local.concurrent == 0
    assert rates_shared.tokens_used == 7 * count("rates", "redis") + 10 * lost
    lost_money = money_shared.concurrent
    assert money_shared.spend_micro_usd == 5_000 * count("money", "redis")
    assert money_shared.held_micro_usd == 10_000 * lost_money
