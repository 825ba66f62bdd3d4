"""The pure routing decision among replicas: exact choices on hand-built snapshots (prefix
matches, load, stickiness, health and drains, panic, the affinity slack)."""

from __future__ import annotations

import pytest

from policies.routing import RoutingPolicy
from routing.types import (
    ApiState,
    NoRouteAvailable,
    SessionEntry,
    SessionTable,
)
from tests.routing.snapshots import MODEL, chain, decide, features, index_with, replica


def test_equal_loads_pick_the_longest_match_with_exact_predictions() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:20], "b": h[:60], "c": ()})
    d = decide([replica("a"), replica("b"), replica("c")], f=features(hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("b", "prefix_match")
    assert d.predicted_cached_tokens == 960  # 60 blocks x 16 tokens
    assert d.predicted_ttft_s == pytest.approx(0.05 + 640 / 1000)
    by_name = {s.backend: s for s in d.scores}
    assert by_name["a"].predicted_cached_tokens == 320
    assert by_name["c"].predicted_ttft_s == pytest.approx(0.05 + 1.6)
    assert [s.backend for s in d.fallbacks] == ["a", "c"]


def test_cached_tokens_never_reach_the_whole_prompt() -> None:
    h = chain("x", 10)
    d = decide([replica("a")], f=features(hashes=h, prompt=160), idx=index_with({"a": h}))
    assert d.predicted_cached_tokens == 159


def test_load_outweighs_a_short_match() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:10]})
    d = decide([replica("a", inflight_tokens=5000), replica("b")], f=features(hashes=h), idx=idx)
    assert d.backend == "b"  # 1.6 s cold beats 5 s queue + 1.44 s


def test_stickiness_holds_until_the_gate_then_moves() -> None:
    h = chain("s", 100)
    idx = index_with({"a": h[:100]})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=2.0)
    # b is cold: 0.05 + 1.6 = 1.65 s. a: 0.05 + (load + 1) / 1000 -> penalty = (load - 1599)/1000
    for load, expect in [(0, "a"), (3599, "a"), (3600, "b"), (10_000, "b")]:
        reps = [replica("a", inflight_tokens=load), replica("b")]
        d = decide(reps, f=features(hashes=h), idx=idx, table=table, policy=policy)
        assert d.backend == expect, load
        assert d.reason == ("sticky" if expect == "a" else "sticky_broken_gate")


def test_expired_session_is_not_sticky() -> None:
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 0.0, 1600)})
    d = decide(
        [replica("a", inflight_tokens=100), replica("b")],
        table=table,
        policy=RoutingPolicy(venue="selfhost_only", session_ttl_s=60),
    )
    assert (d.backend, d.reason) == ("b", "least_ttft")


def test_unhealthy_and_drained_replicas_are_excluded_and_explained() -> None:
    h = chain("c", 50)
    idx = index_with({"a": h, "b": h})
    reps = [replica("a", healthy=False), replica("b", drained_until=200.0), replica("c")]
    d = decide(reps, f=features(hashes=h), idx=idx)
    assert d.backend == "c"
    notes = {s.backend: (s.eligible, s.note) for s in d.scores}
    assert notes["a"] == (False, "unhealthy")
    assert notes["b"] == (False, "drained until 200")
    assert decide(reps, f=features(hashes=h), idx=idx, now=200.0).backend == "b"


def test_no_route_raises_typed_error() -> None:
    with pytest.raises(NoRouteAvailable):
        decide([replica("a")], policy=RoutingPolicy(venue="api_only"))
    with pytest.raises(NoRouteAvailable):
        decide([])


def test_panic_when_every_replica_looks_unhealthy_goes_to_the_earliest_drained() -> None:
    """Envoy's healthy panic: no replica available is no reason to refuse every call; the
    one whose cool-down ends first takes it, the others follow as fallbacks by the same order."""
    reps = [
        replica("a", healthy=False, drained_until=130.0),
        replica("b", healthy=False, drained_until=110.0),
        replica("c", healthy=False, drained_until=120.0),
    ]
    d = decide(reps)
    assert (d.backend, d.reason) == ("b", "panic")
    assert [s.backend for s in d.fallbacks] == ["c", "a"]
    assert {s.note for s in d.scores} == {"panic"}


def test_panic_respects_the_venue() -> None:
    apis = (ApiState("bedrock", MODEL, cooldown_until=105.0),)
    reps = [replica("a", healthy=False, drained_until=110.0)]
    d = decide(reps, apis=apis, policy=RoutingPolicy(venue="selfhost_only"))
    assert (d.backend, d.venue, d.reason) == ("a", "selfhost", "panic")
    d = decide(reps, apis=apis, policy=RoutingPolicy(venue="cheapest"))
    assert (d.backend, d.venue) == ("bedrock", "api")  # its cool-down ends first


def test_affinity_slack_prefers_the_match_among_near_fastest_replicas() -> None:
    h = chain("sys", 100)
    idx = index_with({"a": h[:100]})
    # a holds the whole prompt but has 1800 queued tokens: 0.05 + 1.801 s; b is cold: 1.65 s
    reps = [replica("a", inflight_tokens=1800), replica("b")]
    d = decide(reps, f=features(hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("a", "prefix_match")
    strict = RoutingPolicy(venue="selfhost_only", affinity_slack_s=0.0)
    d = decide(reps, f=features(hashes=h), idx=idx, policy=strict)
    assert (d.backend, d.reason) == ("b", "least_ttft")
    # beyond the slack, load wins again
    d = decide([replica("a", inflight_tokens=2500), replica("b")], f=features(hashes=h), idx=idx)
    assert d.backend == "b"
