"""Capacity in the pure decision: a pick whose replica has no free batch slot goes to a sibling
that has one, unless the session already lives there; fallbacks list free replicas first."""

from __future__ import annotations

from policies.routing import RoutingPolicy
from routing.types import SessionEntry, SessionTable
from tests.routing.snapshots import chain, decide, features, index_with, replica


def test_a_new_session_takes_a_free_sibling_over_a_full_match() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:60], "b": (), "c": h[:20]})
    reps = [replica("a", free_slots=0), replica("b", free_slots=2), replica("c", free_slots=1)]
    d = decide(reps, f=features(hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("c", "slot_free")  # the longest match among the free
    assert d.predicted_cached_tokens == 320
    assert [(s.backend, s.free_slots) for s in d.fallbacks] == [("b", 2), ("a", 0)]


def test_an_unbounded_replica_counts_as_free() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:60]})
    d = decide([replica("a", free_slots=0), replica("b")], f=features(hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("b", "slot_free")


def test_with_every_replica_full_the_pick_stands() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:60]})
    reps = [replica("a", free_slots=0), replica("b", free_slots=0)]
    d = decide(reps, f=features(hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("a", "prefix_match")  # it queues for a slot there


def test_a_session_keeps_its_full_replica() -> None:
    h = chain("s", 100)
    idx = index_with({"a": h})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    reps = [replica("a", free_slots=0), replica("b", free_slots=4)]
    policy = RoutingPolicy(venue="selfhost_only")
    d = decide(reps, f=features(hashes=h), idx=idx, table=table, policy=policy)
    assert (d.backend, d.reason) == ("a", "sticky")
