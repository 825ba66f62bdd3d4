"""What a call costs the other calls on a replica: the stall its prefill adds to the calls
in flight there (a session moves only when staying costs more than the gate plus that stall),
and the KV room the live sessions leave (new sessions and forks go where it is left)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.routing import RoutingPolicy
from routing.prefix_index import PrefixIndex
from routing.types import SessionEntry, SessionTable
from tests.routing.snapshots import chain, decide, features, index_with, replica

STICKY = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
GATE_1S = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=1.0)


def test_scores_carry_the_stall_and_the_room() -> None:
    # 1600-token prompt, 60 blocks cached on a: 640 uncached + 100 answer = 47 new blocks
    h = chain("conv", 100)
    idx = index_with({"a": h[:60]})
    a = replica("a", inflight_requests=5, queue_depth=2, kv_capacity_blocks=500, live_blocks=400)
    d = decide([a, replica("b", kv_capacity_blocks=500)], f=features(hashes=h), idx=idx)
    by_name = {s.backend: s for s in d.scores}
    # 3 running and 2 queued (admitted before it, so running during its prefill), 0.64 s each
    assert by_name["a"].stall_s == pytest.approx(5 * 640 / 1000)
    assert by_name["a"].room_blocks == 500 - 400 - 47
    assert by_name["b"].stall_s == 0.0  # nothing running there
    assert by_name["b"].room_blocks == 500 - 107  # 1600 uncached + 100 answer = 107 blocks


def test_a_session_does_not_move_next_to_busy_calls_for_less_than_their_stall() -> None:
    h = chain("s", 100)
    idx = index_with({"a": h})
    # staying: 0.05 + 4 s queued + 0.001 s; b cold: 0.05 + 1.6 s -> 2.4 s penalty, gate 1 s
    a = replica("a", inflight_tokens=4000)
    idle = decide([a, replica("b")], f=features(hashes=h), idx=idx, table=STICKY, policy=GATE_1S)
    assert (idle.backend, idle.reason) == ("b", "sticky_broken_gate")
    # with one call running on b the move costs it 1.6 s more: 2.4 - 1.6 < 1 s, stay
    b = replica("b", inflight_requests=1)
    busy = decide([a, b], f=features(hashes=h), idx=idx, table=STICKY, policy=GATE_1S)
    assert (busy.backend, busy.reason) == ("a", "sticky")
    # a heavier queue on a breaks the gate again: 5.4 s penalty - 1.6 s stall > 1 s
    a = replica("a", inflight_tokens=7000)
    again = decide([a, b], f=features(hashes=h), idx=idx, table=STICKY, policy=GATE_1S)
    assert (again.backend, again.reason) == ("b", "sticky_broken_gate")


def test_the_stall_of_staying_counts_too() -> None:
    # half the prompt cached on a: staying recomputes 800 tokens next to a's 4 running calls
    h = chain("s", 100)
    idx = index_with({"a": h[:50]})
    b = replica("b", inflight_requests=1)
    cheap_stay = decide(
        [replica("a", inflight_tokens=3000), b],
        f=features(hashes=h),
        idx=idx,
        table=STICKY,
        policy=GATE_1S,
    )
    assert cheap_stay.backend == "a"  # penalty 3.0 + 0.8 - 1.6 = 2.2 s, stalls 0 vs 1.6 s
    costly_stay = decide(
        [replica("a", inflight_tokens=3000, inflight_requests=4), b],
        f=features(hashes=h),
        idx=idx,
        table=STICKY,
        policy=GATE_1S,
    )
    assert costly_stay.backend == "b"  # 2.2 s + 4 x 0.8 s - 1.6 s = 3.8 s > 1 s


def test_a_fork_spills_off_a_replica_its_neighbours_fill() -> None:
    parent = chain("parent", 100)
    idx = index_with({"a": parent})
    fork = features(session="fork", hashes=parent)
    # a holds the whole context, but its live sessions leave no room for the fork's new blocks
    full = replica("a", kv_capacity_blocks=1000, live_blocks=995)
    d = decide([full, replica("b", kv_capacity_blocks=1000)], f=fork, idx=idx)
    assert (d.backend, d.reason) == ("b", "least_ttft")
    roomy = replica("a", kv_capacity_blocks=1000, live_blocks=800)
    d = decide([roomy, replica("b", kv_capacity_blocks=1000)], f=fork, idx=idx)
    assert (d.backend, d.reason) == ("a", "prefix_match")


def test_without_room_anywhere_placement_falls_back_to_the_longest_match() -> None:
    h = chain("conv", 100)
    idx = index_with({"a": h[:60]})
    reps = [
        replica("a", kv_capacity_blocks=1000, live_blocks=1000),
        replica("b", kv_capacity_blocks=1000, live_blocks=1000),
    ]
    d = decide(reps, f=features(session="new", hashes=h), idx=idx)
    assert (d.backend, d.reason) == ("a", "prefix_match")


def test_a_sticky_session_stays_on_a_replica_without_room() -> None:
    # room steers placement only; a live session is not pushed off its own replica by it
    h = chain("s", 100)
    idx = index_with({"a": h})
    a = replica("a", kv_capacity_blocks=1000, live_blocks=1000)
    d = decide(
        [a, replica("b", kv_capacity_blocks=1000)],
        f=features(hashes=h),
        idx=idx,
        table=STICKY,
        policy=GATE_1S,
    )
    assert (d.backend, d.reason) == ("a", "sticky")


@given(
    running=st.integers(0, 30),
    queue=st.integers(0, 30),
    cached_blocks=st.integers(0, 100),
    live=st.integers(0, 5000),
)
def test_stall_and_room_are_consistent(
    running: int, queue: int, cached_blocks: int, live: int
) -> None:
    h = chain("p", 100)
    idx = PrefixIndex()
    idx.add_replica("a", 10_000)
    idx.insert("a", h[:cached_blocks])
    a = replica(
        "a",
        inflight_requests=running + queue,
        queue_depth=queue,
        kv_capacity_blocks=4096,
        live_blocks=live,
    )
    score = decide([a], f=features(hashes=h), idx=idx).scores[0]
    uncached = 1600 - score.predicted_cached_tokens
    assert score.stall_s == pytest.approx((running + queue) * uncached / 1000)
    assert score.stall_s >= 0.0
    assert score.room_blocks == 4096 - live - -(-(uncached + 100) // 16)
