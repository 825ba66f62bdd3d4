"""The routing targets over a grid of seeds: every (scenario, seed) cell of `bench.fleet_sim`
run under round-robin, Lantern and both oracles, with each cell's ratios and what the cells
say together.

    .venv/bin/python -m bench.fleet_grid --seeds 1-24 --workers 2 --json var/fleet_grid.json
    .venv/bin/python -m bench.fleet_grid --from var/fleet_grid.json   # the report again (or several)

Scenario A: one shared system prompt; B: four agent types (`--agent-types 4`); 0.3 sessions/s,
600 simulated seconds, the working set at 70 % of the fleet's KV (the settings of
docs/bench/fleet_sim.md). Each cell is deterministic; cells run in parallel processes.

Why a grid and not one run: each cell is one closed-loop run of ~170 sessions whose hit rate
tips between a fast and a slow regime on a handful of decisions, so two policies that are
equally good differ by several points in single cells. The report therefore prints the
**noise floor** next to Lantern's figures: the same comparison between the two oracles, which
run the same policy on the truth.

The hit-rate target ("Lantern's hit rate >= 95 % of an oracle's") is read on the cells
together: the mean of the per-cell ratios and its one-sided 95 % lower confidence bound
(Student's t), and the pooled ratio (all cells' cached tokens over all prompt tokens). The p95
target (round-robin's p95 TTFT >= 3x Lantern's) is read per cell. Per-cell counts are printed
for both.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

from bench.fleet_sim import SimConfig, Simulation, size_kv

SCENARIOS = {"A": 1, "B": 4}  # scenario -> distinct system prompts (agent types)
STRATEGIES = ("round_robin", "lantern", "oracle_cache", "oracle")
HIT_BAR = 0.95
P95_BAR = 3.0

Cell = dict[str, object]


def run_cell(
    scenario: str, seed: int, cfg: SimConfig, strategies: Sequence[str], saved: Cell | None = None
) -> Cell:
    """One (scenario, seed): the KV sizing pilot, then every strategy on the same trace. With
    `saved` (the same cell from an earlier run at the same settings), its KV size and its
    figures for the strategies not run are reused: each cell is deterministic, so re-running a
    policy that did not change would reproduce them."""
    cfg = replace(cfg, agent_types=SCENARIOS[scenario])
    if saved is not None:
        kv, ws = int(saved["kv_blocks"]), float(saved["working_set"])  # type: ignore[call-overload, arg-type]
    else:
        kv, ws = (cfg.kv_blocks, 0.0) if cfg.kv_blocks else size_kv(cfg, seed)
    results: dict[str, dict[str, float]] = {
        k: v for k, v in (saved or {}).items() if k in STRATEGIES and k not in strategies
    }  # type: ignore[misc]
    for strategy in strategies:
        sim = Simulation(cfg, strategy, seed, kv)
        sim.run()
        results[strategy] = sim.summary()
    return {"scenario": scenario, "seed": seed, "kv_blocks": kv, "working_set": ws, **results}


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (Cornish-Fisher expansion around the normal; within 0.2 % of the
    exact value for df >= 5, which is all a grid of cells needs)."""
    z = statistics.NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def ratio_stats(ratios: Sequence[float], bar: float = HIT_BAR) -> dict[str, float]:
    n = len(ratios)
    mean = statistics.fmean(ratios)
    sd = statistics.stdev(ratios) if n > 1 else 0.0
    lower = mean - t_quantile(0.95, n - 1) * sd / math.sqrt(n) if n > 1 else mean
    return {
        "n": n,
        "mean": mean,
        "sd": sd,
        "lower95": lower,
        "min": min(ratios),
        "below_bar": sum(r < bar for r in ratios),
    }


def _hit(cell: Cell, strategy: str) -> float:
    return float(cell[strategy]["hit_rate"])  # type: ignore[index]


def _vs_better_oracle(cell: Cell) -> float:
    """Lantern's hit rate over the higher of the two oracles' in the same cell."""
    return _hit(cell, "lantern") / max(_hit(cell, "oracle"), _hit(cell, "oracle_cache"))


def _pooled(cells: Iterable[Cell], strategy: str) -> float:
    cells = list(cells)
    hit = sum(float(c[strategy]["hit_tokens"]) for c in cells)  # type: ignore[index]
    prompt = sum(float(c[strategy]["prompt_tokens"]) for c in cells)  # type: ignore[index]
    return hit / prompt if prompt else 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def cell_rows(cells: Sequence[Cell]) -> list[str]:
    rows = [
        "| cell | KV blocks | round_robin hit / p95 s | lantern hit / p50 s / p95 s"
        " | oracle_cache hit | oracle hit | lantern / better oracle | oracle / oracle_cache"
        " | RR p95 / lantern's |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in cells:
        rr, ln = c["round_robin"], c["lantern"]
        oc, orc = _hit(c, "oracle_cache"), _hit(c, "oracle")
        ratio = _vs_better_oracle(c)
        p95x = float(rr["ttft_p95"]) / float(ln["ttft_p95"])  # type: ignore[index]
        mark = "" if ratio >= HIT_BAR else " (below)"
        pmark = "" if p95x >= P95_BAR else " (below)"
        rows.append(
            f"| {c['scenario']}{c['seed']} | {c['kv_blocks']}"
            f" | {rr['hit_rate']:.3f} / {rr['ttft_p95']:.2f}"  # type: ignore[index]
            f" | {ln['hit_rate']:.3f} / {ln['ttft_p50']:.2f} / {ln['ttft_p95']:.2f}"  # type: ignore[index]
            f" | {oc:.3f} | {orc:.3f} | {_pct(ratio)}{mark} | {_pct(orc / oc)}"
            f" | {p95x:.1f}x{pmark} |"
        )
    return rows


def summary_rows(cells: Sequence[Cell]) -> list[str]:
    groups = {
        "all": list(cells),
        **{s: [c for c in cells if c["scenario"] == s] for s in SCENARIOS},
    }
    groups = {k: v for k, v in groups.items() if v}
    rows = [
        "| cells | mean hit: round_robin / lantern / oracle_cache / oracle"
        " | comparison | mean ratio | sd | one-sided 95 % lower bound | min | cells below 95 %"
        " | pooled ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, group in groups.items():
        means = " / ".join(f"{statistics.fmean(_hit(c, s) for c in group):.4f}" for s in STRATEGIES)
        comparisons = [
            ("lantern / better oracle", "lantern", None),
            ("lantern / oracle_cache", "lantern", "oracle_cache"),
            ("lantern / oracle", "lantern", "oracle"),
            ("noise floor: oracle / oracle_cache", "oracle", "oracle_cache"),
            ("noise floor: oracle_cache / oracle", "oracle_cache", "oracle"),
        ]
        for label, num, den in comparisons:
            if den is None:
                ratios = [_vs_better_oracle(c) for c in group]  # num is "lantern" here
                pooled = _pooled(group, num) / max(
                    _pooled(group, "oracle"), _pooled(group, "oracle_cache")
                )
            else:
                ratios = [_hit(c, num) / _hit(c, den) for c in group]
                pooled = _pooled(group, num) / _pooled(group, den)
            st = ratio_stats(ratios)
            rows.append(
                f"| {name} ({len(group)}) | {means} | {label} | {_pct(st['mean'])}"
                f" | {100 * st['sd']:.1f} pt | {_pct(st['lower95'])} | {_pct(st['min'])}"
                f" | {st['below_bar']:.0f} | {_pct(pooled)} |"
            )
            means = ""
    return rows


def verdict(cells: Sequence[Cell]) -> list[str]:
    better = [_vs_better_oracle(c) for c in cells]
    st = ratio_stats(better)
    p95x = [
        float(c["round_robin"]["ttft_p95"]) / float(c["lantern"]["ttft_p95"])  # type: ignore[index]
        for c in cells
    ]
    hit_ok = st["lower95"] >= HIT_BAR
    p95_ok = all(x >= P95_BAR for x in p95x)
    return [
        f"hit rate >= 95 % of the better oracle: {'MET' if hit_ok else 'NOT MET'} on the cells"
        f" together (mean {_pct(st['mean'])}, lower bound {_pct(st['lower95'])});"
        f" per cell {len(cells) - st['below_bar']:.0f} of {len(cells)}",
        f"p95 TTFT >= 3x better than round-robin: {'MET' if p95_ok else 'NOT MET'} per cell,"
        f" {sum(x >= P95_BAR for x in p95x)} of {len(cells)} (min {min(p95x):.1f}x,"
        f" geometric mean {math.exp(statistics.fmean(math.log(x) for x in p95x)):.1f}x)",
    ]


def report(cells: Sequence[Cell]) -> str:
    cells = sorted(cells, key=lambda c: (str(c["scenario"]), int(c["seed"])))  # type: ignore[call-overload]
    return "\n".join([*cell_rows(cells), "", *summary_rows(cells), "", *verdict(cells)])


def parse_seeds(specs: Sequence[str]) -> list[int]:
    seeds: list[int] = []
    for spec in specs:
        lo, _, hi = spec.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", nargs="+", default=["1-24"], help="seeds or ranges, e.g. 1-12 20")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--rate", type=float, default=0.3, help="new sessions per second")
    ap.add_argument("--poll-s", type=float, default=1.0, help="engine metrics cadence; 0: none")
    ap.add_argument("--workers", type=int, default=2, help="cells run in parallel")
    ap.add_argument(
        "--strategies",
        nargs="+",
        default=list(STRATEGIES),
        choices=list(STRATEGIES),
        help="run only these; the others' figures (and the KV sizes) come from --reuse",
    )
    ap.add_argument(
        "--reuse",
        type=Path,
        nargs="+",
        default=[],
        help="saved --json files of the same settings: KV sizes and the strategies not run",
    )
    ap.add_argument("--json", type=Path, help="write every cell's figures here")
    ap.add_argument(
        "--from", dest="load", type=Path, nargs="+", help="report saved --json files; run nothing"
    )
    args = ap.parse_args(argv)
    if args.load:
        print(report([c for p in args.load for c in json.loads(p.read_text())["cells"]]))
        return
    cfg = SimConfig(duration_s=args.duration, session_rate=args.rate, poll_s=args.poll_s)
    jobs = [(s, seed) for s in args.scenarios for seed in parse_seeds(args.seeds)]
    saved: dict[tuple[str, int], Cell] = {}
    for p in args.reuse:
        data = json.loads(p.read_text())
        their = {k: data["settings"][k] for k in ("duration_s", "rate")}
        if their != {"duration_s": args.duration, "rate": args.rate}:
            ap.error(
                f"{p} was run at {their}, not at --duration {args.duration} --rate {args.rate}"
            )
        saved.update({(str(c["scenario"]), int(c["seed"])): c for c in data["cells"]})
    missing = [f"{s}{seed}" for s, seed in jobs if (s, seed) not in saved]
    if set(args.strategies) != set(STRATEGIES) and missing:
        ap.error(f"--strategies without every strategy needs --reuse covering {missing}")
    cells: list[Cell] = []
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        futures = {
            pool.submit(run_cell, s, seed, cfg, args.strategies, saved.get((s, seed))): (s, seed)
            for s, seed in jobs
        }
        for fut in as_completed(futures):
            cell = fut.result()
            cells.append(cell)
            s, seed = futures[fut]
            print(
                f"{s}{seed}: lantern {_hit(cell, 'lantern'):.3f}, oracle_cache"
                f" {_hit(cell, 'oracle_cache'):.3f}, oracle {_hit(cell, 'oracle'):.3f}"
                f" ({len(cells)}/{len(jobs)}, {time.monotonic() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {"duration_s": args.duration, "rate": args.rate, "poll_s": args.poll_s}
        args.json.write_text(json.dumps({"settings": settings, "cells": cells}, indent=1))
    print(report(cells))


if __name__ == "__main__":
    main()
