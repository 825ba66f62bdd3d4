"""The routing grid's statistics and verdicts (bench/fleet_grid.py)."""

from __future__ import annotations

import json
import math

import pytest

from bench import fleet_grid
from bench.fleet_sim import SimConfig


@pytest.mark.parametrize(
    ("df", "exact"),
    [(5, 2.015048), (10, 1.812461), (23, 1.713872), (47, 1.677927), (200, 1.652508)],
)
def test_t_quantile_matches_tables(df: int, exact: float) -> None:
    assert fleet_grid.t_quantile(0.95, df) == pytest.approx(exact, rel=2e-3)


def test_ratio_stats_lower_bound_and_count() -> None:
    ratios = [0.99, 1.01, 0.97, 1.03, 0.94, 1.00]
    st = fleet_grid.ratio_stats(ratios)
    mean = sum(ratios) / 6
    sd = math.sqrt(sum((r - mean) ** 2 for r in ratios) / 5)
    assert st["mean"] == pytest.approx(mean)
    assert st["sd"] == pytest.approx(sd)
    assert st["lower95"] == pytest.approx(mean - 2.015048 * sd / math.sqrt(6), rel=1e-3)
    assert st["below_bar"] == 1 and st["min"] == 0.94


def _cell(scenario: str, seed: int, lantern: float, cache: float, oracle: float, p95: float):
    def fig(hit: float, ttft_p95: float) -> dict[str, float]:
        return {
            "hit_rate": hit,
            "hit_tokens": hit * 1000,
            "prompt_tokens": 1000.0,
            "ttft_p50": 0.1,
            "ttft_p95": ttft_p95,
        }

    return {
        "scenario": scenario,
        "seed": seed,
        "kv_blocks": 1000,
        "round_robin": fig(0.4, 10.0),
        "lantern": fig(lantern, p95),
        "oracle_cache": fig(cache, 1.0),
        "oracle": fig(oracle, 1.0),
    }


def test_verdict_reads_hit_together_and_p95_per_cell() -> None:
    # one cell below 95 % of its better oracle, the rest at par: met on the cells together
    cells = [_cell("A", s, 0.80, 0.80, 0.79, 1.0) for s in range(1, 12)]
    cells.append(_cell("B", 1, 0.74, 0.80, 0.78, 1.0))
    hit, p95 = fleet_grid.verdict(cells)
    assert hit.startswith("hit rate >= 95 % of the better oracle: MET")
    assert "per cell 11 of 12" in hit
    assert p95.startswith("p95 TTFT >= 3x better than round-robin: MET per cell, 12 of 12")
    # a single cell whose p95 is under 3x round-robin's fails the p95 target
    cells.append(_cell("B", 2, 0.80, 0.80, 0.80, 4.0))
    assert "NOT MET per cell, 12 of 13" in fleet_grid.verdict(cells)[1]
    # Lantern well below the oracles everywhere fails the hit target
    low = [_cell("A", s, 0.70, 0.80, 0.80, 1.0) for s in range(1, 6)]
    assert "NOT MET" in fleet_grid.verdict(low)[0]


def test_report_from_saved_cells(tmp_path, capsys) -> None:
    cells = [_cell("A", 2, 0.80, 0.81, 0.82, 1.0), _cell("A", 1, 0.78, 0.80, 0.79, 2.0)]
    paths = [tmp_path / "a2.json", tmp_path / "a1.json"]  # two runs' files, reported together
    for path, cell in zip(paths, cells, strict=True):
        path.write_text(json.dumps({"settings": {}, "cells": [cell]}))
    fleet_grid.main(["--from", *map(str, paths)])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(("| A1 ", "| A2 "))]
    assert [ln.split(" | ")[0] for ln in lines] == ["| A1", "| A2"]  # sorted by seed
    assert "97.5 %" in lines[0]  # 0.78 / 0.80
    assert "5.0x" in lines[0]  # 10 / 2
    assert "noise floor: oracle / oracle_cache" in out


def test_parse_seeds_ranges() -> None:
    assert fleet_grid.parse_seeds(["1-3", "7", "10-11"]) == [1, 2, 3, 7, 10, 11]


def test_run_cell_is_deterministic_and_complete() -> None:
    cfg = SimConfig(duration_s=40.0, warmup_s=10.0, session_rate=0.3)
    a = fleet_grid.run_cell("B", 3, cfg, ("round_robin", "lantern"))
    b = fleet_grid.run_cell("B", 3, cfg, ("round_robin", "lantern"))
    assert a == b
    assert a["kv_blocks"] > 0
    for strategy in ("round_robin", "lantern"):
        fig = a[strategy]
        assert 0 < fig["hit_tokens"] <= fig["prompt_tokens"]  # type: ignore[index]
        assert fig["hit_rate"] == pytest.approx(fig["hit_tokens"] / fig["prompt_tokens"])  # type: ignore[index]
