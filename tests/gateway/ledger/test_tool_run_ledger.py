"""`ToolRunLedger`: a finished tool run's row, its price per vCPU-second and GB-second (the
settings' defaults: Fargate's on-demand Linux/x86 price, local free), stored once per run."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.http.tools_wiring import tool_run_ledger
from gateway.ledger.models import UsageRow
from gateway.ledger.tool_runs import RunnerPrice, ToolRunLedger, tool_run_row
from gateway.ledger.usage_insert import insert_rows
from gateway.settings import SettingsError, load_settings
from sandbox.fargate import task_size
from sandbox.metering import FinishedRun
from sandbox.types import RunStatus

TS = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
FARGATE_RUN = FinishedRun(
    run_id="0123456789abcdef0123456789abcdef",
    tenant="acme",
    key_id="k1",
    session_id="s-1",
    door="mcp",
    tool="render",
    runner="fargate",
    status=RunStatus.SUCCEEDED,
    duration_s=7.0,
    vcpu=0.25,
    memory_gb=0.5,
)


class Lines:
    def __init__(self) -> None:
        self.rows: list[UsageRow] = []

    def record_line(self, line: bytes) -> None:
        self.rows.append(UsageRow.from_line(line))


def _defaults() -> tuple[Lines, ToolRunLedger]:
    lines = Lines()
    prices = load_settings().sandbox.prices
    return lines, tool_run_ledger(lines, prices, lambda: TS)


def test_a_fargate_run_costs_a_minute_at_least_at_the_published_price() -> None:
    """0.25 vCPU and 0.5 GB for 7 s: billed 60 s, 15 vCPU-s x $0.04048/h + 30 GB-s x
    $0.004445/h = $0.000205708... stored as $0.00020571."""
    lines, ledger = _defaults()
    ledger.record(FARGATE_RUN)
    (row,) = lines.rows
    assert (row.kind, row.tenant, row.key_id, row.session_id, row.door) == (
        "tool_run",
        "acme",
        "k1",
        "s-1",
        "mcp",
    )
    assert (row.model, row.backend, row.request_id, row.status) == (
        "render",
        "sandbox:fargate",
        FARGATE_RUN.run_id,
        "ok",
    )
    assert (row.vcpu_seconds, row.gb_seconds, row.latency_ms) == (15.0, 30.0, 7000.0)
    assert (row.cost_usd, row.uncached_cost_usd) == (Decimal("0.00020571"),) * 2


def test_a_longer_run_is_billed_by_the_second_rounded_up() -> None:
    lines, ledger = _defaults()
    ledger.record(replace(FARGATE_RUN, duration_s=3600.2, vcpu=1.0, memory_gb=2.0))
    (row,) = lines.rows
    assert (row.vcpu_seconds, row.gb_seconds) == (3601.0, 7202.0)
    # 3601 x 0.04048 / 3600 + 7202 x 0.004445 / 3600 = 0.04049124... + 0.00889246...
    assert row.cost_usd == Decimal("0.04938371")


def test_a_local_run_is_free_by_default_and_still_recorded() -> None:
    lines, ledger = _defaults()
    ledger.record(replace(FARGATE_RUN, runner="local", vcpu=1.0, duration_s=0.25))
    (row,) = lines.rows
    assert (row.backend, row.cost_usd, row.vcpu_seconds, row.gb_seconds) == (
        "sandbox:local",
        Decimal(0),
        1.0,
        0.5,
    )


@pytest.mark.parametrize(
    "status",
    [RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.LIMIT_EXCEEDED, RunStatus.INFRA_FAILED],
)
def test_a_run_that_did_not_succeed_is_billed_as_an_error_of_its_kind(status: RunStatus) -> None:
    lines, ledger = _defaults()
    ledger.record(replace(FARGATE_RUN, status=status))
    (row,) = lines.rows
    assert (row.status, row.error_kind, row.cost_usd) == (
        "error",
        status.value,
        Decimal("0.00020571"),
    )


def test_the_same_run_metered_twice_is_stored_once(engine, count_rows) -> None:
    """A Fargate task followed to its end by two workers (one took the other's lease over)."""
    price = RunnerPrice(0.04048, 0.004445, 60)
    first, second = (tool_run_row(FARGATE_RUN, TS, price) for _ in range(2))
    insert_rows(engine, [first])
    insert_rows(engine, [second])
    assert count_rows(engine) == 1


def test_a_run_the_table_would_refuse_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines, ledger = _defaults()
    with caplog.at_level(logging.ERROR, logger="gateway.ledger.tool_runs"):
        ledger.record(replace(FARGATE_RUN, tenant="t" * 129))
    assert lines.rows == []
    assert "unusable tool run" in caplog.records[0].getMessage()


def test_a_described_task_gives_its_billed_size() -> None:
    assert task_size({"cpu": "256", "memory": "512"}) == (0.25, 0.5)
    assert task_size({"cpu": "4096", "memory": "30720"}) == (4.0, 30.0)
    assert task_size({}) == (None, None)


def test_a_negative_price_names_its_setting(tmp_path: Path) -> None:
    path = tmp_path / "lantern.yaml"
    path.write_text("sandbox:\n  prices:\n    fargate:\n      vcpu_hour_usd: -1\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    (issue,) = caught.value.issues
    assert "sandbox.prices.fargate.vcpu_hour_usd" in str(issue)


def test_prices_are_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "lantern.yaml"
    path.write_text("sandbox:\n  prices:\n    local: {vcpu_hour_usd: 0.36, min_billed_s: 60}\n")
    prices = load_settings(path).sandbox.prices
    assert (prices.local.vcpu_hour_usd, prices.local.gb_hour_usd, prices.local.min_billed_s) == (
        0.36,
        0.0,
        60.0,
    )
    assert prices.fargate.vcpu_hour_usd == 0.04048  # a section left out keeps its defaults


def test_the_demo_defaults_hold_the_settings_defaults() -> None:
    from gateway.settings import ToolRunPriceSettings, demo_settings

    assert demo_settings().sandbox.prices == ToolRunPriceSettings()


def test_a_run_whose_session_the_table_would_refuse_is_billed_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A door that let an unusable session through (over the column's 256 characters) must not
    make the run free: the row goes without the session."""
    lines, ledger = _defaults()
    with caplog.at_level(logging.WARNING, logger="gateway.ledger.tool_runs"):
        ledger.record(replace(FARGATE_RUN, session_id="s" * 257))
    (row,) = lines.rows
    assert (row.session_id, row.tenant, row.cost_usd) == (None, "acme", Decimal("0.00020571"))
    assert caplog.records[0].getMessage() == (
        f"usage ledger: tool run {FARGATE_RUN.run_id} billed without its session"
    )
