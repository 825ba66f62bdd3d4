"""The admission-wait term of the predicted TTFT: exact values, its invariants, and how it
moves a sticky session off a replica that cannot admit it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.router import admission_wait_s
from adapters.routing_types import ReplicaState, SessionEntry, SessionTable
from policies.routing import RoutingPolicy
from tests.adapters.test_router import chain, decide, features, index_with, replica


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


def test_a_sticky_session_leaves_a_replica_that_cannot_admit_it() -> None:
    h = chain("s", 100)
    idx = index_with({"a": h})
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 1600)})
    policy = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=1.0)
    # a: 0.05 + wait + 1/1000; b cold: 1.65 s. The gate breaks once wait > 2.599 s.
    for queue, expect in [(0, "sticky"), (4, "sticky"), (5, "sticky_broken_gate")]:
        a = replica("a", queue_depth=queue, kv_free_blocks=0, admit_interval_s=0.5)
        d = decide([a, replica("b")], f=features(hashes=h), idx=idx, table=table, policy=policy)
        assert d.reason == expect, queue
        assert d.backend == ("a" if expect == "sticky" else "b")
