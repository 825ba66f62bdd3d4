"""The reference path of the fleet's plan, as test wiring: the full routing decision for every
route, a replica alone in its routes included (the served fleet plans such a replica without
its prefix index: with nothing to choose, matching and pinning buy nothing)."""

from __future__ import annotations

from gateway.fleet.routing_port import Fleet
from gateway.fleet.state import ReplicaRecord
from gateway.ports import ModelRoute
from policies.model import TenantPolicy


class FullDecisionFleet(Fleet):
    def _lone(self, route: ModelRoute, tenant: TenantPolicy) -> ReplicaRecord | None:
        return None
