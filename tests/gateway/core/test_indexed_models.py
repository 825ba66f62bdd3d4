"""Which model routes' calls are prefix-hashed: those whose router reads the hashes (a
self-hosted replica among two or more candidates), and no others."""

from __future__ import annotations

from typing import Any, cast

from gateway.core.models_table import indexed_models
from gateway.ports import Backend, Candidate, ModelRoute

NO_BACKEND = cast(Backend, cast(Any, object()))


def _route(name: str, *venues: str) -> ModelRoute:
    return ModelRoute(
        name,
        tuple(
            Candidate(NO_BACKEND, f"b{i}", cast(Any, venue), f"http://r{i}/v1")
            for i, venue in enumerate(venues)
        ),
    )


def test_only_routes_that_choose_among_replicas_are_indexed() -> None:
    routes = [
        _route("lone", "selfhost"),
        _route("api", "api"),
        _route("apis", "api", "api"),
        _route("pair", "selfhost", "selfhost"),
        _route("spill", "selfhost", "api"),
    ]
    assert indexed_models(routes) == {"pair", "spill"}
