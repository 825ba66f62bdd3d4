"""Which calls hold a replica's slot. A plan whose first replica has a capacity (`max_in_flight`,
else what its engine showed) enters it before dispatch: at once while a slot is free (no queue
work), else through the fair queue (`admission_queue`). The slot belongs to that first attempt
and is left when it completes, or when the call is given up before dispatch. The slots are this
process's own (`ReplicaSlots`) or, with Redis, the deployment's (`SharedSlots`: `share`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.fleet.admission_queue import ReplicaSlots, SlotPool
from gateway.fleet.registry import FleetRegistry
from gateway.ports import Attempt, RoutePlan
from policies.model import TenantPolicy
from routing.types import replica_key


class SlotGate:
    def __init__(self, registry: FleetRegistry, clock: Callable[[], float]) -> None:
        self._reg = registry
        self.slots: SlotPool = ReplicaSlots(clock)
        self._held: dict[int, str] = {}  # id(attempt) -> the replica key whose slot it holds

    def share(self, pool: SlotPool) -> None:
        """Count slots in `pool` from now on (before serving: slots held stay in the old one)."""
        self.slots = pool

    def capacity(self, key: str) -> int | None:
        """The configured `max_in_flight`, else the engine's observed batch size; None: no
        bound known (calls go straight through, as without a gate)."""
        r = self._reg.replicas[key]
        return r.spec.max_in_flight or r.engine_max_in_flight

    def free_slots(self, key: str) -> int | None:
        """Slots of `key` a new call of this process would find free (none while calls wait
        for one); None: no capacity known. With shared slots, this process's calls only: the
        decision reads no Redis."""
        capacity = self.capacity(key)
        if capacity is None:
            return None
        return 0 if self.slots.waiting(key) else max(capacity - self.slots.held(key), 0)

    def enter(self, plan: RoutePlan, tenant: TenantPolicy) -> Awaitable[RoutePlan] | None:
        """None when the call may go now (a slot taken, or none needed); else the wait, which
        gives the plan with `queued_ms` in its details or raises `QueueShed`."""
        first = plan.attempts[0]
        c = first.candidate
        if c.venue != "selfhost":
            return None
        key = replica_key(c.backend_name, c.replica)
        capacity = self.capacity(key)
        if capacity is None:
            return None
        if self.slots.take(key, capacity):
            self._held[id(first)] = key
            return None
        return self._queued(plan, key, capacity, tenant)

    async def _queued(
        self, plan: RoutePlan, key: str, capacity: int, tenant: TenantPolicy
    ) -> RoutePlan:
        knobs = tenant.routing
        waited_s = await self.slots.wait(
            key,
            capacity,
            tenant.tenant,
            weight=knobs.queue_weight,
            max_wait_s=knobs.max_queue_ms / 1000.0,
            service_s=self._reg.replicas[key].service_s,
        )
        self._held[id(plan.attempts[0])] = key
        if waited_s is None:  # a slot was free: not queued
            return plan
        return RoutePlan(plan.attempts, {**plan.details, "queued_ms": round(waited_s * 1000, 1)})

    def leave(self, attempt: Attempt) -> None:
        """Give the attempt's slot back (to the next waiter); a no-op for one holding none."""
        key = self._held.pop(id(attempt), None)
        if key is not None:
            self.slots.release(key)

    def held_by(self, attempt: Attempt) -> str | None:
        return self._held.get(id(attempt))
