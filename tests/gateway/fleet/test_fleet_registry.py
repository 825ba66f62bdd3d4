"""FleetRegistry.register: called with every plan, it passes over a route object it has
registered; a reloaded route (a new object under the same name) is registered anew."""

from __future__ import annotations

from gateway.fleet.registry import FleetRegistry
from gateway.ports import Candidate, ModelRoute


def _candidate(name: str, replica: str | None = None) -> Candidate:
    venue = "selfhost" if replica else "api"
    return Candidate(object(), name, venue, replica)  # type: ignore[arg-type]


def test_a_registered_route_is_passed_over_and_a_reloaded_one_registered_anew() -> None:
    registry = FleetRegistry({})
    route = ModelRoute("m", (_candidate("local", "http://a"),))
    registry.register(route)
    assert len(registry.replicas) == 1
    first = dict(registry.replicas)
    registry.register(route)
    assert registry.replicas == first and all(first[k] is registry.replicas[k] for k in first)
    assert list(registry.pool.values()) == [1]

    reloaded = ModelRoute("m", (_candidate("local", "http://a"), _candidate("local", "http://b")))
    registry.register(reloaded)
    assert len(registry.replicas) == 2
    assert sorted(registry.pool.values()) == [2, 2]  # the pool widened with the new route

    api = ModelRoute("m", (*reloaded.candidates, _candidate("openai")))
    registry.register(api)
    assert list(registry.apis) == ["openai"]
