"""Command line of the fleet simulator: every strategy per seed, one Markdown table row each.

.venv/bin/python -m bench.fleet_sim --duration 600 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from bench.fleet_sim.simulation import Simulation
from bench.fleet_sim.state import SimConfig
from bench.fleet_trace import signal_report, tail_report

STRATEGIES = (
    "round_robin",
    "least_loaded",
    "session_hash",
    "prefix_only",
    "lantern",
    "oracle_cache",
    "oracle",
)


def size_kv(cfg: SimConfig, seed: int) -> tuple[int, float]:
    """Measure the working set with an unbounded cache, then size KV to ws_target of it."""
    sim = Simulation(cfg, "lantern", seed, kv_blocks=10**9)
    sim.run()
    ws = statistics.fmean(sim.ws_samples)
    return max(int(ws / (cfg.ws_target * cfg.replicas)), 1), ws


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet_sim", description=__doc__)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--rate", type=float, default=0.5, help="new sessions per second")
    ap.add_argument("--ws-target", type=float, default=0.70)
    ap.add_argument("--kv-blocks", type=int, default=0)
    ap.add_argument("--agent-types", type=int, default=4, help="distinct system prompts")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--poll-s", type=float, default=1.0, help="engine metrics cadence; 0: none")
    ap.add_argument("--trace", action="store_true", help="who the slowest 5 %% of calls are")
    args = ap.parse_args(argv)
    cfg = SimConfig(
        duration_s=args.duration,
        session_rate=args.rate,
        ws_target=args.ws_target,
        kv_blocks=args.kv_blocks,
        agent_types=args.agent_types,
        poll_s=args.poll_s,
        check_signal=args.trace,
    )
    for seed in args.seeds:
        kv, ws = (cfg.kv_blocks, 0.0) if cfg.kv_blocks else size_kv(cfg, seed)
        print(
            f"\nseed {seed}: {cfg.replicas} replicas x {kv} KV blocks of {cfg.block_tokens} tokens;"
            f" working set {ws:.0f} blocks = {ws / (kv * cfg.replicas):.0%} of fleet KV"
        )
        print(
            "| strategy | requests | token hit rate | TTFT p50 s | TTFT p95 s | load CV | $/Mtok (busy) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for strategy in args.strategies:
            sim = Simulation(cfg, strategy, seed, kv)
            sim.run()
            m = sim.summary()
            print(
                f"| {strategy} | {m['requests']:.0f} | {m['hit_rate']:.3f} | {m['ttft_p50']:.3f} |"
                f" {m['ttft_p95']:.3f} | {m['spread_cv']:.3f} | {m['busy_usd_per_mtok']:.3f} |",
                flush=True,
            )
            if args.trace:
                report = [*tail_report(sim.traced), signal_report(sim.signal_errors)]
                print("\n".join(["", f"{strategy}, seed {seed}:", *report, ""]))
