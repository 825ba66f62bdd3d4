"""The fleet simulator's own parts: the true block cache, and determinism per seed."""

from __future__ import annotations

import random

from bench.fleet_sim import Pool, Req, Session, SimConfig, Simulation
from bench.fleet_trace import move_report
from gateway.ports import Attempt, Candidate


def test_pool_evicts_tails_first_and_never_pinned_blocks() -> None:
    pool = Pool(capacity=4)
    a = [b"a0", b"a1", b"a2"]
    pool.acquire(a)
    assert pool.match(a) == 3
    pool.release(a)
    b = [b"b0", b"b1"]
    assert pool.can_hold(b)
    pool.acquire(b)  # 5 blocks for 4 slots: the tail of a goes first
    assert pool.match(a) == 2
    assert pool.match(b) == 2
    assert not pool.can_hold([b"c0", b"c1", b"c2", b"c3"])  # b is pinned
    pool.release(b)
    assert pool.can_hold([b"c0", b"c1", b"c2", b"c3"])


def test_shared_blocks_are_reference_counted() -> None:
    pool = Pool(capacity=3)
    pool.acquire([b"s", b"x"])
    pool.acquire([b"s", b"y"])
    assert pool.ref == {b"s": 2, b"x": 1, b"y": 1}
    pool.release([b"s", b"x"])
    assert pool.ref == {b"s": 1, b"y": 1} and list(pool.lru) == [b"x"]


def test_same_seed_same_run() -> None:
    cfg = SimConfig(duration_s=40.0, warmup_s=5.0, session_rate=0.5)
    runs = []
    for _ in range(2):
        sim = Simulation(cfg, "lantern", seed=3, kv_blocks=1500)
        sim.run()
        runs.append(sim.summary())
    assert runs[0] == runs[1]
    assert runs[0]["requests"] > 0


def test_replicas_report_load_at_the_poll_cadence_and_the_oracle_sees_it_fresh() -> None:
    cfg = SimConfig(duration_s=30.0, warmup_s=5.0, session_rate=0.5, poll_s=2.0)
    sim = Simulation(cfg, "lantern", seed=3, kv_blocks=1500)
    sim.run()
    stamps = {sim.fleet.signals.last(r.key).sampled_at for r in sim.replicas}  # type: ignore[union-attr]
    assert stamps == {28.0}  # the last poll before 30 s, not the last decision
    off = Simulation(SimConfig(duration_s=30.0, poll_s=0.0), "lantern", seed=3, kv_blocks=1500)
    off.run()
    assert all(off.fleet.signals.last(r.key) is None for r in off.replicas)
    oracle = Simulation(cfg, "oracle", seed=3, kv_blocks=1500)
    oracle.run()
    fresh = {oracle.fleet.signals.last(r.key).sampled_at for r in oracle.replicas}  # type: ignore[union-attr]
    assert len(fresh) == 1 and fresh.pop() % 2.0 != 0.0  # sampled at a decision, not a poll


def test_move_report_counts_bounces_returns_and_late_admissions() -> None:
    def call(sid: str, t: float, replica: str, reason: str, waited: float = 0.0) -> Req:
        session = Session(sid, [], 0, 0, random.Random(0))
        attempt = Attempt(Candidate(None, "engine", "selfhost", replica), reason)  # type: ignore[arg-type]
        return Req(session, t, [], [], attempt, admitted_at=t + waited, predicted_wait=0.25)

    traced = [
        call("s1", 1.0, "r0", "prefix_match"),
        call("s1", 2.0, "r1", "sticky_broken_gate", waited=1.0),  # 0.75 s later than predicted
        call("s1", 3.0, "r0", "sticky_broken_gate"),  # the next call: a bounce, back to r0
        call("s1", 4.0, "r0", "sticky"),
        call("s1", 5.0, "r0", "sticky"),
        call("s1", 6.0, "r2", "sticky_broken_gate", waited=0.7),  # three calls on: no bounce
        call("s2", 1.5, "r1", "least_ttft"),
        call("s2", 2.5, "r1", "sticky"),
    ]
    assert move_report(traced[::-1]) == (
        "moves: 3; within two calls of the session's previous move: 1;"
        " back to a replica it used before: 1; admitted more than 0.5 s later than predicted: 1"
    )
