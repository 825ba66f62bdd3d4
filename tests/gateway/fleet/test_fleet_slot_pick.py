"""The fleet hands the router each replica's free slots: with one replica's slot held, the next
new session goes to its sibling instead of queueing (gateway/fleet/capacity.py)."""

from __future__ import annotations

import random

from gateway.fleet.routing_port import Fleet, FleetConfig
from gateway.fleet.state import ReplicaSpec
from gateway.ports import Candidate, ModelRoute
from tests.gateway.fleet.test_admission_queue import tenant
from tests.routing.test_router_fleet import Clock, ProbeBackend, prepared


def test_a_held_slot_sends_the_next_call_to_the_sibling() -> None:
    cands = tuple(Candidate(ProbeBackend(u), "local", "selfhost", f"http://{u}") for u in "ab")  # type: ignore[arg-type]
    route = ModelRoute("smollm2", cands)
    specs = {"local": ReplicaSpec(max_in_flight=1)}
    fleet = Fleet([route], FleetConfig(), clock=Clock(), rng=random.Random(1), specs=specs)
    acme = tenant("acme")
    first = fleet.plan(route, acme, "s1", prepared(()), 100, 10)
    assert fleet.queue(first, acme) is None  # takes the slot
    second = fleet.plan(route, acme, "s2", prepared(()), 100, 10)
    assert fleet.queue(second, acme) is None  # a free slot on the other replica
    keys = [p.details["replica"] for p in (first, second)]
    assert sorted(keys) == ["local@http://a", "local@http://b"]
    assert second.attempts[0].reason == "slot_free"
    fleet.release(first)
    assert fleet.gate.free_slots(str(keys[0])) == 1
