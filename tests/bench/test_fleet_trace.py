"""The simulator's check of the fleet's engine view (`--trace`): what it reports, and that it
reads without changing a decision."""

from __future__ import annotations

from bench.fleet_sim import SimConfig, Simulation
from bench.fleet_trace import SignalError, signal_report


def test_signal_report_splits_by_the_sample_and_gives_bias_and_mean_abs() -> None:
    errors = [
        SignalError(True, 300, 1),
        SignalError(True, -100, 0),
        SignalError(False, -20, -1),
        SignalError(False, 0, 0),
        SignalError(False, 5, 0),
    ]
    assert signal_report(errors) == (
        "engine view at decisions, less the truth:"
        " free KV where the sample showed a queue: bias +100.0, mean abs 200.0 blocks (2);"
        " free KV where the sample showed no queue: bias -5.0, mean abs 8.3 blocks (3);"
        " waiting requests: bias +0.00, mean abs 0.40"
    )
    assert signal_report([]) == "engine view at decisions, less the truth: no signal"


def _run(strategy: str, check: bool) -> Simulation:
    # 400 blocks a replica: KV-bound, so queues form and the stale view drifts
    cfg = SimConfig(duration_s=60.0, warmup_s=10.0, session_rate=0.5, check_signal=check)
    sim = Simulation(cfg, strategy, seed=2, kv_blocks=400)
    sim.run()
    return sim


def test_checking_the_view_changes_no_decision_and_the_fresh_oracle_is_exact() -> None:
    checked, plain = _run("lantern", True), _run("lantern", False)
    assert checked.summary() == plain.summary()
    assert plain.signal_errors == []
    assert any(e.sample_queued for e in checked.signal_errors)
    assert any(e.free_blocks != 0 for e in checked.signal_errors)  # a 1 s old sample drifts
    oracle = _run("oracle", True)  # sampled at every decision: nothing to bring up to date
    assert oracle.signal_errors
    assert all(e.free_blocks == 0 and e.queue_depth == 0 for e in oracle.signal_errors)
