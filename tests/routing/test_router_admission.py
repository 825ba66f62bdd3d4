"""The admission-wait term of the predicted TTFT: exact values, its invariants, and where it
counts: in the prediction and the venue (overflow past the TTFT bound), not in the replica
pick (a queue alone does not move a session)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.routing import RoutingPolicy
from routing.decision import admission_wait_s
from routing.types import ApiState, ReplicaState, SessionEntry, SessionTable
from tests.routing.snapshots import MODEL, chain, decide, features, index_with, replica


def test_wait_is_zero_while_the_new_blocks_fit() -> None:
    r = replica("a", queue_depth=3, kv_free_blocks=20, admit_interval_s=0.5)
    assert admission_wait_s(r, 20) == 0.0


def test_wait_counts_the_queue_and_the_call_when_kv_is_short() -> None:
    r = replica("a", queue_depth=3, kv_free_blocks=20, admit_interval_s=0.5)
    assert admission_wait_s(r, 21) == pytest.approx(2.0)  # (3 ahead + itself) x 0.5 s
    assert admission_wait_s(replace_queue(r, 0), 21) == pytest.approx(0.5)


def test_without_a_kv_signal_only_the_queue_counts() -> None:
    r = replica("a", queue_depth=2, kv_free_blocks=None, admit_interval_s=0.25)
    assert admission_wait_s(r, 10_000) == pytest.approx(0.5)


def test_no_engine_signal_means_no_wait() -> None:
    assert admission_wait_s(replica("a", admit_interval_s=9.0), 10_000) == 0.0


def replace_queue(r: ReplicaState, depth: int) -> ReplicaState:
    return replace(r, queue_depth=depth)


@given(
    queue=st.integers(0, 50),
    free=st.one_of(st.none(), st.integers(0, 5000)),
    need=st.integers(0, 5000),
    interval=st.floats(0.0, 10.0),
)
def test_wait_grows_with_the_queue_and_shrinks_with_free_kv(
    queue: int, free: int | None, need: int, interval: float
) -> None:
    r = replica("a", queue_depth=queue, kv_free_blocks=free, admit_interval_s=interval)
    wait = admission_wait_s(r, need)
    assert wait >= 0.0
    assert admission_wait_s(replace_queue(r, queue + 1), need) >= wait
    if free is not None:
        more = replica("a", queue_depth=queue, kv_free_blocks=free + 100, admit_interval_s=interval)
        assert admission_wait_s(more, need) <= wait


def test_score_adds_the_wait_to_the_prefill_prediction() -> None:
    # 1600-token prompt, 60 blocks cached on a: 640 uncached + 100 answer = 47 new blocks
    h = chain("conv", 100)
    idx = index_with({"a": h[:60]})
    a = replica("a", queue_depth=1, kv_free_blocks=46, admit_interval_s=0.75)
    d = decide([a, replica("b")], f=features(hashes=h), idx=idx)
    by_name = {s.backend: s for s in d.scores}
    assert by_name["a"].admission_wait_s == pytest.approx(1.5)
    assert by_name["a"].predicted_ttft_s == pytest.approx(0.05 + 1.5 + 640 / 1000)
    assert by_name["b"].admission_wait_s == 0.0
    # a new session is placed on prefix and queued prefill alone: a (0.69 s) beats b (1.65 s)
    assert (d.backend, d.reason) == ("a", "prefix_match")
    assert d.predicted_ttft_s == pytest.approx(0.05 + 1.5 + 0.64)  # the prediction keeps it


def test_an_admission_queue_alone_does_not_move_a_sticky_session() -> None:
    # the wait clears as calls finish; a move would recompute the whole context for good
    h = chain("s", 100)
    idx = index_with({"a": h})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=1.0)
    for queue in (0, 5, 50):
        a = replica("a", queue_depth=queue, kv_free_blocks=0, admit_interval_s=0.5)
        d = decide([a, replica("b")], f=features(hashes=h), idx=idx, table=table, policy=policy)
        assert (d.backend, d.reason) == ("a", "sticky"), queue
        # the explanation still predicts the wait
        assert d.predicted_ttft_s == pytest.approx(0.05 + (queue + 1) * 0.5 + 1 / 1000)


def test_queued_prefill_still_moves_a_sticky_session_past_the_gate() -> None:
    # a: 0.05 + (inflight + 1) / 1000 s; b cold: 0.05 + 1.6 s. Staying costs more than the
    # 1 s gate once a's queued prefill passes 2,599 tokens.
    h = chain("s", 100)
    idx = index_with({"a": h})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=1.0)
    for inflight, expect in [(2500, "sticky"), (2700, "sticky_broken_gate")]:
        a = replica("a", inflight_tokens=inflight, queue_depth=3, kv_free_blocks=0)
        d = decide([a, replica("b")], f=features(hashes=h), idx=idx, table=table, policy=policy)
        assert d.reason == expect, inflight
        assert d.backend == ("a" if expect == "sticky" else "b")


def test_a_fleet_session_behind_a_queue_past_the_slo_overflows_to_an_api() -> None:
    # the venue reads the whole prediction, wait included: 0.05 + 6 x 0.5 s > ttft_slo_s (2 s)
    h = chain("s", 100)
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="cheapest", ttft_slo_s=2.0)
    apis = (ApiState("openai", MODEL),)
    for queue, free, expect in [(5, 0, "api"), (0, 500, "selfhost")]:
        a = replica("a", queue_depth=queue, kv_free_blocks=free, admit_interval_s=0.5)
        idx = index_with({"a": h})
        d = decide([a], f=features(hashes=h), idx=idx, table=table, apis=apis, policy=policy)
        assert d.venue == expect, queue
        if expect == "api":
            assert (d.backend, d.reason) == ("openai", "overflow_ttft_slo:api_cheapest")
        else:
            assert (d.backend, d.reason) == ("a", "sticky")


def test_a_fleet_session_past_the_slo_moves_within_the_fleet_before_an_api() -> None:
    # a's queue puts it past the bound (0.05 + 6 x 0.5 s); b and c meet it: the session moves
    # to the one holding more of its prefix, on hardware already paid for, not to the API
    h = chain("s", 100)
    idx = index_with({"a": h, "c": h[:50]})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="cheapest", ttft_slo_s=2.0)
    a = replica("a", queue_depth=5, kv_free_blocks=0, admit_interval_s=0.5)
    reps = [a, replica("b"), replica("c")]
    apis = (ApiState("openai", MODEL),)
    d = decide(reps, f=features(hashes=h), idx=idx, table=table, apis=apis, policy=policy)
    assert (d.venue, d.backend, d.reason) == ("selfhost", "c", "ttft_slo_move")
    assert d.predicted_ttft_s == pytest.approx(0.05 + 800 / 1000)
    # with every replica past the bound, the API
    slow = [replace(r, inflight_tokens=5000) for r in reps]
    d = decide(slow, f=features(hashes=h), idx=idx, table=table, apis=apis, policy=policy)
    assert (d.venue, d.reason) == ("api", "overflow_ttft_slo:api_cheapest")
