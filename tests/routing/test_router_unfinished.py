"""The cap that calls in flight without a first token put on a replica's prefill rate: new
sessions are placed on it (a first burst spreads), a session's stay-or-move is not (a call
still running there says nothing of the replica next door)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.routing import RoutingPolicy
from routing.types import ReplicaState, RequestFeatures, SessionEntry, SessionTable
from tests.routing.snapshots import MODEL, chain, decide, index_with, replica

H = chain("s", 4)
GATE = RoutingPolicy(venue="selfhost_only", stickiness_gate_s=1.0)


def call(session: str) -> RequestFeatures:
    """The e2e session's second call: 55 tokens, the first 32 cached where its first call ran."""
    return RequestFeatures("acme", session, MODEL, H[:3], 55, 6)


def fleet(a_learned: float | None) -> list[ReplicaState]:
    """a: one call of another session in flight for a while without a first token, which caps
    a's rate at 50 tok/s (`a_learned`: what a learned from finished calls; None: 50 too); b:
    two calls dispatched just now (no cap yet)."""
    a = replica("a", inflight_requests=1, inflight_tokens=32, prefill_tok_s=50.0)
    b = replica("b", inflight_requests=2, inflight_tokens=46, prefill_tok_s=460.0)
    return [replace(a, learned_tok_s=a_learned), b]


def test_an_unfinished_call_does_not_move_a_session_off_its_cache() -> None:
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 32)})
    idx = index_with({"a": H[:2]})
    d = decide(fleet(563.0), f=call("s1"), idx=idx, table=table, policy=GATE)
    assert (d.backend, d.reason) == ("a", "sticky")
    a = next(s for s in d.scores if s.backend == "a")
    # what the cap adds on a: (32 + 23 queued, + 1 x 23 stalled) x (1/50 - 1/563) s
    assert a.unfinished_s == pytest.approx(78 * (1 / 50 - 1 / 563))
    assert a.predicted_ttft_s == pytest.approx(0.05 + 55 / 50)  # the prediction keeps the cap


def test_a_learned_slow_replica_still_moves_the_session() -> None:
    table = SessionTable({"s1": SessionEntry("s1", "selfhost", "a", "a", 99.0, 32)})
    idx = index_with({"a": H[:2]})
    d = decide(fleet(None), f=call("s1"), idx=idx, table=table, policy=GATE)
    assert (d.backend, d.reason) == ("b", "sticky_broken_gate")
    assert all(s.unfinished_s == 0.0 for s in d.scores)


def test_a_new_session_is_still_placed_on_the_capped_rate() -> None:
    d = decide(fleet(563.0), f=call("new"), idx=index_with({}), policy=GATE)
    assert (d.backend, d.reason) == ("b", "least_ttft")
