"""Slots shared between tenants: a freed slot goes to the waiting tenants in turn, a tenant's
own waiters keep their order, a caller that goes away (waiting, or just handed a slot) leaves
nothing held, and the table holds only tenants in flight."""

from __future__ import annotations

import asyncio

import anyio
from anyio import wait_all_tasks_blocked

from gateway.core.tenant_gate import TenantGate


async def _hold(gate: TenantGate, tenant: str, served: list[str], go: anyio.Event) -> None:
    async with gate.slot(tenant):
        served.append(tenant)
        await go.wait()


def test_a_freed_slot_goes_to_the_waiting_tenants_in_turn() -> None:
    """One slot: acme holds it with two more waiting, then globex's two and initech's one
    arrive; they are served acme, globex, initech, acme, globex, acme (arrival order would
    have served all of acme's first)."""
    gate = TenantGate(per_tenant=1, num_slots=1)
    served: list[str] = []
    go = anyio.Event()

    async def run() -> list[int]:
        sizes: list[int] = []
        async with anyio.create_task_group() as tg:
            for tenant in ("acme", "acme", "acme", "globex", "globex", "initech"):
                tg.start_soon(_hold, gate, tenant, served, go)
                await wait_all_tasks_blocked()
            sizes.append(len(gate))
            go.set()
        sizes.append(len(gate))
        return sizes

    assert anyio.run(run) == [3, 0]
    assert served == ["acme", "globex", "initech", "acme", "globex", "acme"]


def test_a_tenant_over_its_own_bound_waits_while_others_go_through() -> None:
    """Two per tenant, no bound in all (the Responses door's reads): acme's third waits,
    globex's first is served at once."""
    gate = TenantGate(per_tenant=2)
    served: list[str] = []
    go = anyio.Event()

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            for tenant in ("acme", "acme", "acme", "globex"):
                tg.start_soon(_hold, gate, tenant, served, go)
                await wait_all_tasks_blocked()
            assert served == ["acme", "acme", "globex"]
            go.set()
        assert len(gate) == 0

    anyio.run(run)
    assert served == ["acme", "acme", "globex", "acme"]


def test_a_caller_cancelled_while_waiting_holds_nothing() -> None:
    """globex's client goes away while it waits: when acme is done the table is empty (no
    slot was handed to a caller that is gone), and initech is served at once."""
    gate = TenantGate(per_tenant=1, num_slots=1)
    served: list[str] = []
    go = anyio.Event()

    async def run() -> list[int]:
        sizes: list[int] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_hold, gate, "acme", served, go)
            await wait_all_tasks_blocked()
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(_hold, gate, "globex", served, go)
                await wait_all_tasks_blocked()
                sizes.append(len(gate))
                waiting.cancel_scope.cancel()
            go.set()
        assert len(gate) == 0  # else globex's slot leaked, and initech would wait for ever
        async with gate.slot("initech"):
            served.append("initech")
        sizes.append(len(gate))
        return sizes

    assert anyio.run(run) == [2, 0]
    assert served == ["acme", "initech"]


def test_a_caller_cancelled_as_it_is_handed_the_slot_passes_it_on() -> None:
    """acme frees the slot, which goes to globex, whose task is cancelled before it resumes
    (asyncio's `task.cancel()`, as a server cancels a request's task): the slot goes on to
    initech, globex's work never runs, and the table empties."""
    gate = TenantGate(per_tenant=1, num_slots=1)
    served: list[str] = []

    async def run() -> list[int]:
        go = anyio.Event()
        acme = gate.slot("acme")
        await acme.__aenter__()
        globex = asyncio.create_task(_hold(gate, "globex", served, go))
        initech = asyncio.create_task(_hold(gate, "initech", served, go))
        await wait_all_tasks_blocked()
        await acme.__aexit__(None, None, None)  # hands the slot to globex, no yield between
        globex.cancel()
        await wait_all_tasks_blocked()
        assert served == ["initech"]  # else the slot went with globex, and initech waits on
        sizes = [len(gate)]
        go.set()
        await initech
        sizes.append(len(gate))
        assert globex.cancelled()
        return sizes

    assert asyncio.run(run()) == [1, 0]  # initech's, then none
    assert served == ["initech"]
