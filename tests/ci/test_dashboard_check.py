"""`.ci/dashboard_check.py` (run by `make check`): a dashboard that queries a metric the gateway
does not expose, or lacks a dashboard's parts, is flagged; the shipped one passes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

CHECKER = Path(__file__).resolve().parents[2] / ".ci" / "dashboard_check.py"


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard_check", CHECKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dashboard_check"] = module
    spec.loader.exec_module(module)
    return module


def test_metric_names_leave_labels_ranges_and_strings_out(checker: ModuleType) -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, gen_ai_request_model) (rate("
        'gen_ai_client_operation_duration_seconds_bucket{lantern_tenant=~"lantern_x"}[5m])))'
    )
    assert checker.metric_names(expr) == {"gen_ai_client_operation_duration_seconds_bucket"}


def test_an_unknown_metric_and_a_missing_part_are_flagged(
    checker: ModuleType, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    Counter("lantern_cost_usd", "c", ["tenant"], registry=registry)
    Histogram("gen_ai_client_token_usage", "t", ["lantern_tenant"], registry=registry)
    exposed = checker.exposed_names(registry)
    assert {"lantern_cost_usd_total", "gen_ai_client_token_usage_sum"} <= exposed
    doc = {
        "uid": "u",
        "title": "t",
        "panels": [
            {"type": "timeseries", "title": "ok", "gridPos": {},
             "targets": [{"expr": "sum(rate(lantern_cost_usd_total[5m]))"}]},
            {"type": "timeseries", "title": "typo", "gridPos": {},
             "targets": [{"expr": "sum(rate(lantern_cost_total[5m]))"}]},
            {"type": "stat", "title": "bare"},
        ],
    }  # fmt: skip
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc))
    assert checker.problems(path, exposed) == [
        "d.json: panel 1 (typo): lantern_cost_total is not on /metrics",
        "d.json: panel 2 (bare): no gridPos",
        "d.json: panel 2 (bare): no targets",
    ]


@pytest.mark.slow
def test_the_shipped_dashboards_pass(checker: ModuleType) -> None:
    exposed = checker.exposed_names(checker.gateway_registry())
    assert [p for path in checker.DASHBOARDS for p in checker.problems(path, exposed)] == []
