"""Which model routes' calls are prefix-hashed: those whose router reads the hashes (a route
naming a self-hosted replica that some route offers beside another candidate), and no others."""

from __future__ import annotations

from typing import Any, cast

from gateway.fleet.registry import indexed_models
from gateway.ports import Backend, Candidate, ModelRoute

NO_BACKEND = cast(Backend, cast(Any, object()))


def _route(name: str, *candidates: tuple[str, str]) -> ModelRoute:
    """`candidates`: (venue, backend name), each replica at its backend's own URL."""
    return ModelRoute(
        name,
        tuple(
            Candidate(NO_BACKEND, backend, cast(Any, venue), f"http://{backend}/v1")
            for venue, backend in candidates
        ),
    )


def test_only_routes_that_choose_among_replicas_are_indexed() -> None:
    routes = [
        _route("lone", ("selfhost", "a")),
        _route("api", ("api", "p")),
        _route("apis", ("api", "p"), ("api", "q")),
        _route("pair", ("selfhost", "b"), ("selfhost", "c")),
        _route("spill", ("selfhost", "d"), ("api", "p")),
        # one candidate, but its replica is also one of "pair"'s: not lone (`Fleet._lone`)
        _route("shared", ("selfhost", "c")),
    ]
    assert indexed_models(routes) == {"pair", "spill", "shared"}
