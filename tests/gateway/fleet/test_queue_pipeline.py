"""Through the real pipeline: a call shed at a full replica, or abandoned while it waits,
holds and charges nothing (its quota reservation is settled at zero, no ledger row, no slot),
and a waiting call takes the slot its predecessor's completion frees."""

from __future__ import annotations

import asyncio

import pytest

from gateway.fleet.admission_queue import QueueShed
from gateway.fleet.state import ReplicaSpec
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from quotas.memory import MemoryQuotaStore
from tests.gateway.core.pipeline_harness import build

KEY = "replica@http://replica-1/v1"


def tenant(max_queue_ms: int) -> TenantPolicy:
    return TenantPolicy(
        tenant="acme",
        limits=LimitsPolicy(max_output_tokens=10, concurrent_requests=2),
        routing=RoutingPolicy(max_queue_ms=max_queue_ms),
    )


def test_shed_and_abandoned_calls_hold_nothing() -> None:
    h = build(MemoryQuotaStore())
    h.fleet.registry.replicas[KEY].spec = ReplicaSpec(max_in_flight=1)
    slots = h.fleet.gate.slots

    async def go() -> None:
        first = await h.pipeline.admit(h.call(tenant(5000), "first"))
        assert slots.held(KEY) == 1
        with pytest.raises(QueueShed):  # a bound of 0 ms: shed at once
            await h.pipeline.admit(h.call(tenant(0), "shed"))
        # the shed call gave its reservation back: this one fits the 2 concurrent calls
        waiting = asyncio.ensure_future(h.pipeline.admit(h.call(tenant(5000), "waits")))
        await asyncio.sleep(0.01)
        assert (slots.held(KEY), slots.waiting(KEY)) == (1, 1)
        await h.pipeline.complete(first)
        second = await waiting
        assert "queued_ms" in second.plan.details
        assert "x-lantern-queue-ms" in second.headers(h.admission)
        # one more waits, and its client goes away: out of the queue, reservation settled
        gone = asyncio.ensure_future(h.pipeline.admit(h.call(tenant(5000), "gone")))
        await asyncio.sleep(0.01)
        assert slots.waiting(KEY) == 1
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert (slots.held(KEY), slots.waiting(KEY)) == (1, 0)
        await h.pipeline.complete(second)
        assert (slots.held(KEY), slots.waiting(KEY)) == (0, 0)
        # nothing leaked: both of the tenant's 2 concurrent calls and the slot are free
        third = await h.pipeline.admit(h.call(tenant(5000), "third"))
        with pytest.raises(QueueShed):  # the slot is third's; the quota still admits this one
            await h.pipeline.admit(h.call(tenant(0), "fourth"))
        await h.pipeline.complete(third)

    asyncio.run(go())
    assert [r.status for r in h.parts.rows] == ["ok", "ok", "ok"]  # no row for shed or gone
    assert [r.queue_ms for r in h.parts.rows] == [None, 0.0, None]  # only "waits" queued
    metrics = h.pipeline.s.telemetry.metrics.registry
    assert metrics.get_sample_value("lantern_queue_seconds_count", {"model": "m"}) == 1.0
    assert h.backend.started == 3
