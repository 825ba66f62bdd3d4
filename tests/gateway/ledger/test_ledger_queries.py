"""Ledger aggregations, exact to the cent, on SQLite and the real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.ledger.db import session_factory
from gateway.ledger.queries import HourlyModelTokens, LedgerQueries, UsageTotals
from gateway.ledger.usage_insert import insert_rows
from gateway.reports.spend import budget_lines
from tests.gateway.ledger.ledger_dataset import DEC_1, NOV_1, edge_rows, november_rows


@pytest.fixture
def queries(engine) -> LedgerQueries:
    insert_rows(engine, [*november_rows(), *edge_rows()])
    return LedgerQueries(session_factory(engine))


def D(text: str) -> Decimal:
    return Decimal(text).quantize(Decimal("1e-8"))


def test_totals_by_tenant(queries):
    assert queries.usage_totals(NOV_1, DEC_1, ["tenant"]) == [
        UsageTotals(
            ("acme",), 3, 1_350_000, 600_000, 600_000, 190_000, D("5.04"), D("6.21"), 0, 25_000
        ),
        UsageTotals(("globex",), 3, 500_000, 900_000, 0, 300_000, D("2.07"), D("4.50")),
    ]


def test_totals_by_model_and_day_use_utc_days(queries):
    assert queries.usage_totals(NOV_1, DEC_1, ["model", "day"]) == [
        UsageTotals(
            ("claude-sonnet", "2026-11-01"),
            2,
            350_000,
            600_000,
            600_000,
            90_000,
            D("4.83"),
            D("6.00"),
        ),
        UsageTotals(
            ("claude-sonnet", "2026-11-02"), 2, 100_000, 900_000, 0, 100_000, D("2.07"), D("4.50")
        ),
        UsageTotals(
            ("gpt-4o-mini", "2026-11-02"),
            1,
            1_000_000,
            0,
            0,
            100_000,
            D("0.21"),
            D("0.21"),
            0,
            25_000,
        ),
        UsageTotals(("gpt-4o-mini", "2026-11-03"), 1, 400_000, 0, 0, 200_000, D("0"), D("0")),
    ]


def test_totals_by_backend_name_rows_without_one(queries):
    groups = [
        (t.group, t.num_calls, t.cost_usd) for t in queries.usage_totals(NOV_1, DEC_1, ["backend"])
    ]
    assert groups == [
        (("(none)",), 1, D("0")),
        (("anthropic",), 2, D("4.83")),
        (("bedrock",), 1, D("2.07")),
        (("openai",), 1, D("0.21")),
        (("selfhost",), 1, D("0")),
    ]


def test_window_is_half_open_and_ungrouped_totals_are_one_row(queries):
    assert queries.usage_totals(NOV_1, DEC_1, []) == [
        UsageTotals(
            (), 6, 1_850_000, 1_500_000, 600_000, 490_000, D("7.11"), D("10.71"), 0, 25_000
        ),
    ]
    with_edges = queries.usage_totals(
        datetime(2026, 10, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC), []
    )
    assert with_edges[0].cost_usd == D("307.11")
    assert (
        queries.usage_totals(datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 2, 1, tzinfo=UTC), [])
        == []
    )


def test_unknown_group_key_is_refused(queries):
    with pytest.raises(ValueError):
        queries.usage_totals(NOV_1, DEC_1, ["prompt"])


def test_month_spend_by_tenant(queries):
    assert queries.month_spend_by_tenant(datetime(2026, 11, 3, 0, 0, 1, tzinfo=UTC)) == {
        "acme": 5.04,
        "globex": 2.07,
    }
    assert queries.month_spend_by_tenant(datetime(2026, 11, 2, tzinfo=UTC)) == {"acme": 4.83}
    # December has only the row stamped exactly at its first instant.
    assert queries.month_spend_by_tenant(datetime(2026, 12, 15, tzinfo=UTC)) == {"acme": 200.0}


def test_hourly_model_tokens_split_fleet_from_api(queries):
    def at(day: int, hour: int) -> datetime:
        return datetime(2026, 11, day, hour, tzinfo=UTC)

    assert queries.hourly_model_tokens(NOV_1, DEC_1) == [
        HourlyModelTokens(
            "claude-sonnet", "api", at(1, 10), 2, 350_000, 600_000, 600_000, 90_000, D("4.83")
        ),
        HourlyModelTokens("claude-sonnet", "api", at(2, 12), 1, 0, 0, 0, 0, D("0")),
        HourlyModelTokens(
            "claude-sonnet", "api", at(2, 23), 1, 100_000, 900_000, 0, 100_000, D("2.07")
        ),
        HourlyModelTokens("gpt-4o-mini", "api", at(2, 8), 1, 1_000_000, 0, 0, 100_000, D("0.21")),
        HourlyModelTokens("gpt-4o-mini", "fleet", at(3, 0), 1, 400_000, 0, 0, 200_000, D("0")),
    ]


def test_session_diagnoses_are_scoped_to_the_tenant(queries):
    assert queries.session_diagnoses("acme", "s-1") == [
        (
            datetime(2026, 11, 1, 10, 0, tzinfo=UTC),
            '{"verdict":"write","stable_prefix_tokens":600000}',
        ),
        (datetime(2026, 11, 1, 10, 5, tzinfo=UTC), '{"verdict":"hit"}'),
    ]
    assert queries.session_diagnoses("globex", "s-1") == [
        (datetime(2026, 11, 2, 23, 59, 59, tzinfo=UTC), '{"verdict":"hit"}'),
    ]
    assert queries.session_diagnoses("acme", "s-404") == []


def test_budget_spend_leaves_tool_runs_out(engine, make_row):
    """`monthly_budget_usd` counts calls (held before they run), not tool runs: the spend
    seeded into the quota store and the console's budget lines leave them out, whole days (the
    rollup) and partial days alike; the cost report keeps them."""
    rows = [
        make_row(ts=datetime(2026, 11, day, 9, tzinfo=UTC), cost_usd=Decimal("1.25"))
        for day in (1, 2, 3)
    ]
    runs = [
        make_row(
            ts=datetime(2026, 11, day, 10, tzinfo=UTC),
            kind="tool_run",
            model="render",
            backend="sandbox:fargate",
            input_tokens=0,
            output_tokens=0,
            cost_usd=Decimal("0.00020571"),
            uncached_cost_usd=Decimal("0.00020571"),
            vcpu_seconds=15.0,
            gb_seconds=30.0,
        )
        for day in (1, 2, 3)
    ]
    only_runs = make_row(
        ts=datetime(2026, 11, 2, tzinfo=UTC),
        tenant="globex",
        kind="tool_run",
        backend="sandbox:local",
        cost_usd=0.5,
    )
    insert_rows(engine, [*rows, *runs, only_runs])
    sessions = session_factory(engine)
    queries = LedgerQueries(sessions)
    now = datetime(2026, 11, 3, 12, tzinfo=UTC)  # two whole days and a partial one
    assert queries.month_spend_by_tenant(now) == {"acme": 3.75, "globex": 0.0}
    assert [(b.tenant, b.spent_usd) for b in budget_lines(sessions, {"acme": None}, now)] == [
        ("acme", D("3.75")),
        ("globex", D("0")),
    ]
    totals = queries.usage_totals(NOV_1, now, ["tenant"])
    assert [(t.group, t.cost_usd) for t in totals] == [
        (("acme",), D("3.75") + 3 * D("0.00020571")),
        (("globex",), D("0.5")),
    ]


def test_the_breakeven_hours_hold_model_calls_only(engine, make_row):
    insert_rows(
        engine,
        [
            make_row(ts=NOV_1, model="gpt-4o-mini"),
            make_row(ts=NOV_1, model="render", kind="tool_run", input_tokens=0),
            make_row(ts=NOV_1, model="search", kind="tool_call", door="mcp", input_tokens=0),
        ],
    )
    hours = LedgerQueries(session_factory(engine)).hourly_model_tokens(NOV_1, DEC_1)
    assert [(h.model, h.num_calls) for h in hours] == [("gpt-4o-mini", 1)]
