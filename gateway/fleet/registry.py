"""What the fleet knows: the self-hosted replicas and API providers its routes name (their live
records), the per-replica prefix index, the session table and each session's last plan. Shared
by the fleet's parts; no decisions and no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.fleet.state import ApiRecord, ReplicaRecord, ReplicaSpec
from gateway.ports import Candidate, ModelRoute
from routing.prefix_index import PrefixIndex
from routing.types import CandidateScore, SessionEntry, replica_key


class FleetRegistry:
    """The records by key. A route registers its candidates once; one seen again only widens
    the pool of the replicas it names."""

    def __init__(self, specs: Mapping[str, ReplicaSpec]) -> None:
        self._specs = dict(specs)
        self.index = PrefixIndex()
        self.replicas: dict[str, ReplicaRecord] = {}
        self.apis: dict[str, ApiRecord] = {}
        self._routes: dict[str, ModelRoute] = {}  # name -> the route object last registered
        self.sessions: dict[str, SessionEntry] = {}
        # session -> (prompt tokens, max tokens) of its last plan, for on_dispatch
        self.planned: dict[str, tuple[int, int]] = {}
        self.pool: dict[str, int] = {}  # replica key -> the most candidates of a route naming it

    def register(self, route: ModelRoute) -> None:
        """Called with every plan: a route object registered already is passed over (nothing
        is ever removed, so it would change nothing); a reloaded route, a new object, is
        registered anew."""
        if self._routes.get(route.name) is route:
            return
        self._routes[route.name] = route
        widen_pool(self.pool, route)
        for c in route.candidates:
            if c.venue == "selfhost":
                key = replica_key(c.backend_name, c.replica)
                if key not in self.replicas:
                    spec = self._specs.get(c.backend_name, ReplicaSpec())
                    self.replicas[key] = ReplicaRecord(c, route.name, spec)
                    self.index.add_replica(key, spec.kv_capacity_blocks)
            elif c.backend_name not in self.apis:
                self.apis[c.backend_name] = ApiRecord(c, route.name)

    def candidate(self, score: CandidateScore) -> Candidate:
        if score.venue == "selfhost" and score.replica is not None:
            return self.replicas[score.replica].candidate
        return self.apis[score.backend].candidate


def widen_pool(pool: dict[str, int], route: ModelRoute) -> None:
    """`FleetRegistry.pool` once `route` is known: each of its replicas' pool is at least its
    number of candidates."""
    for c in route.candidates:
        if c.venue == "selfhost":
            key = replica_key(c.backend_name, c.replica)
            pool[key] = max(pool.get(key, 0), len(route.candidates))


def indexed_models(routes: Sequence[ModelRoute]) -> frozenset[str]:
    """The model routes whose calls the router matches against a replica's prefix index: those
    naming a self-hosted replica that some route offers beside another candidate. The others
    (a replica alone in every route naming it, which `Fleet._lone` keeps without an index, and
    provider APIs, which have none) leave a call's prefix hashes unread, so they are not
    computed."""
    pool: dict[str, int] = {}
    for route in routes:
        widen_pool(pool, route)
    return frozenset(
        route.name
        for route in routes
        if any(
            c.venue == "selfhost" and pool[replica_key(c.backend_name, c.replica)] > 1
            for c in route.candidates
        )
    )
