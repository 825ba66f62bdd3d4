"""Hand-built fleet snapshots for the routing tests (replicas, prefix chains, an index, request
features) and `decide`, which runs the pure routing decision on one."""

from __future__ import annotations

import hashlib
import random

from policies.routing import RoutingPolicy
from routing.decision import choose, lantern_pick
from routing.prefix_index import PrefixIndex
from routing.types import (
    FleetSnapshot,
    Prices,
    ReplicaState,
    RequestFeatures,
    SessionTable,
)

MODEL = "smollm2"


def chain(tag: str, n: int) -> tuple[bytes, ...]:
    out, parent = [], b""
    for i in range(n):
        parent = hashlib.blake2b(parent + f"{tag}:{i}".encode(), digest_size=8).digest()
        out.append(parent)
    return tuple(out)


def replica(name: str, **kw: object) -> ReplicaState:
    base: dict[str, object] = {"prefill_tok_s": 1000.0, "base_ttft_s": 0.05}
    base.update(kw)
    return ReplicaState(backend=name, url=None, model=MODEL, **base)  # type: ignore[arg-type]


def features(
    session: str = "s1", hashes: tuple[bytes, ...] = (), prompt: int = 1600
) -> RequestFeatures:
    return RequestFeatures("acme", session, MODEL, hashes, prompt, 100)


def index_with(contents: dict[str, tuple[bytes, ...]]) -> PrefixIndex:
    idx = PrefixIndex()
    for name, hashes in contents.items():
        idx.add_replica(name, 10_000)
        idx.insert(name, hashes)
    return idx


def decide(
    reps,
    *,
    f=None,
    idx=None,
    apis=(),
    table=None,
    prices=Prices(),
    policy=None,
    now=100.0,
    seed=0,
    seq=0,
    picker=lantern_pick,
):
    snap = FleetSnapshot(tuple(reps), tuple(apis), idx or index_with({}), seq)
    return choose(
        f or features(),
        snap,
        table or SessionTable(),
        prices,
        policy or RoutingPolicy(venue="selfhost_only"),
        now,
        random.Random(seed),
        picker,
    )
