"""Cost reports: grouping by several keys on SQLite and PostgreSQL, and golden table/CSV/JSON."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows
from gateway.reports.cost import (
    CostReport,
    CostRow,
    InvalidReportQuery,
    cost_report,
    parse_group_by,
    parse_period,
    report_document,
    to_csv,
    to_json,
    to_table,
)
from gateway.reports.focus import FOCUS_GROUP_BY, FOCUS_MANDATORY_COLUMNS, to_focus_csv
from gateway.reports.spend import ToolCallCount, spend_series, tool_call_counts
from tests.gateway.ledger.ledger_dataset import DEC_1, NOV_1, edge_rows, november_rows


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sessions(request, tmp_path):
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    insert_rows(engine, [*november_rows(), *edge_rows()])
    yield session_factory(engine)
    engine.dispose()


def money(text: str) -> Decimal:
    return Decimal(text).quantize(Decimal("1e-8"))


def test_report_by_tenant_and_model(sessions):
    report = cost_report(sessions, NOV_1, DEC_1, ["tenant", "model"])
    assert report.group_by == ("tenant", "model")
    assert [(r.group, r.num_calls, r.cost_usd, r.saved_usd) for r in report.rows] == [
        (("acme", "claude-sonnet"), 2, money("4.83"), money("1.17")),
        (("acme", "gpt-4o-mini"), 1, money("0.21"), money("0")),
        (("globex", "claude-sonnet"), 2, money("2.07"), money("2.43")),
        (("globex", "gpt-4o-mini"), 1, money("0"), money("0")),
    ]
    totals = report.totals
    assert (totals.num_calls, totals.cost_usd, totals.uncached_cost_usd, totals.saved_usd) == (
        6,
        money("7.11"),
        money("10.71"),
        money("3.60"),
    )
    assert totals.prompt_tokens == 3_950_000
    assert totals.cache_hit_ratio == 1_500_000 / 3_950_000


def test_report_by_tenant_and_day(sessions):
    report = cost_report(sessions, NOV_1, DEC_1, ["tenant", "day"])
    assert [(r.group, r.cost_usd, r.cache_read_tokens) for r in report.rows] == [
        (("acme", "2026-11-01"), money("4.83"), 600_000),
        (("acme", "2026-11-02"), money("0.21"), 0),
        (("globex", "2026-11-02"), money("2.07"), 900_000),
        (("globex", "2026-11-03"), money("0"), 0),
    ]


def test_report_by_backend_counts_rejected_calls_under_none(sessions):
    report = cost_report(sessions, NOV_1, DEC_1, ["backend"])
    assert [(r.group[0], r.num_calls) for r in report.rows] == [
        ("(none)", 1),
        ("anthropic", 2),
        ("bedrock", 1),
        ("openai", 1),
        ("selfhost", 1),
    ]


def _golden_report() -> CostReport:
    def row(group, calls, inp, read, write, out, cost, uncached, write_1h, reasoning):
        money_ = money(cost), money(uncached)
        return CostRow(group, calls, inp, read, write, out, *money_, write_1h, reasoning)

    rows = (
        row(("acme", "2026-11-01"), 2, 350_000, 600_000, 600_000, 90_000, "4.83", "6.00", 0, 0),
        row(
            ("globex", "2026-11-02"),
            1,
            100_000,
            0,
            300_000,
            100_000,
            "2.625",
            "1.80",
            300_000,
            40_000,
        ),
    )
    totals = row((), 3, 450_000, 600_000, 900_000, 190_000, "7.455", "7.80", 300_000, 40_000)
    return CostReport(
        NOV_1, datetime(2026, 11, 3, 12, 0, tzinfo=UTC), ("tenant", "day"), rows, totals
    )


GOLDEN_TABLE = """\
cost report 2026-11-01T00:00:00+00:00 .. 2026-11-03T12:00:00+00:00 (UTC, until exclusive)
tenant  day         calls    input  cache read  cache write  1h write   output  reasoning  hit %  cost $  uncached $  saved $
------  ----------  -----  -------  ----------  -----------  --------  -------  ---------  -----  ------  ----------  -------
acme    2026-11-01      2  350,000     600,000      600,000         0   90,000          0   38.7    4.83        6.00     1.17
globex  2026-11-02      1  100,000           0      300,000   300,000  100,000     40,000    0.0    2.63        1.80   -0.825
------  ----------  -----  -------  ----------  -----------  --------  -------  ---------  -----  ------  ----------  -------
TOTAL                   3  450,000     600,000      900,000   300,000  190,000     40,000   30.8    7.46        7.80    0.345
"""

GOLDEN_CSV = """\
period_start,period_end,tenant,day,num_calls,input_tokens,cache_read_tokens,cache_write_tokens,cache_write_1h_tokens,output_tokens,reasoning_tokens,cache_hit_ratio,cost_usd,uncached_cost_usd,saved_usd
2026-11-01T00:00:00+00:00,2026-11-03T12:00:00+00:00,acme,2026-11-01,2,350000,600000,600000,0,90000,0,0.3871,4.83000000,6.00000000,1.17000000
2026-11-01T00:00:00+00:00,2026-11-03T12:00:00+00:00,globex,2026-11-02,1,100000,0,300000,300000,100000,40000,0.0000,2.62500000,1.80000000,-0.82500000
2026-11-01T00:00:00+00:00,2026-11-03T12:00:00+00:00,TOTAL,,3,450000,600000,900000,300000,190000,40000,0.3077,7.45500000,7.80000000,0.34500000
"""


def test_table_golden():
    assert to_table(_golden_report()) == GOLDEN_TABLE


def test_csv_golden():
    assert to_csv(_golden_report()) == GOLDEN_CSV


def test_json_golden():
    document = json.loads(to_json(_golden_report()))
    assert document == {
        "since": "2026-11-01T00:00:00+00:00",
        "until": "2026-11-03T12:00:00+00:00",
        "currency": "USD",
        "group_by": ["tenant", "day"],
        "rows": [
            {
                "tenant": "acme",
                "day": "2026-11-01",
                "num_calls": 2,
                "input_tokens": 350000,
                "cache_read_tokens": 600000,
                "cache_write_tokens": 600000,
                "cache_write_1h_tokens": 0,
                "output_tokens": 90000,
                "reasoning_tokens": 0,
                "prompt_tokens": 1550000,
                "cache_hit_ratio": 0.387097,
                "cost_usd": 4.83,
                "uncached_cost_usd": 6.0,
                "saved_usd": 1.17,
            },
            {
                "tenant": "globex",
                "day": "2026-11-02",
                "num_calls": 1,
                "input_tokens": 100000,
                "cache_read_tokens": 0,
                "cache_write_tokens": 300000,
                "cache_write_1h_tokens": 300000,
                "output_tokens": 100000,
                "reasoning_tokens": 40000,
                "prompt_tokens": 400000,
                "cache_hit_ratio": 0.0,
                "cost_usd": 2.625,
                "uncached_cost_usd": 1.8,
                "saved_usd": -0.825,
            },
        ],
        "totals": {
            "num_calls": 3,
            "input_tokens": 450000,
            "cache_read_tokens": 600000,
            "cache_write_tokens": 900000,
            "cache_write_1h_tokens": 300000,
            "output_tokens": 190000,
            "reasoning_tokens": 40000,
            "prompt_tokens": 1950000,
            "cache_hit_ratio": 0.307692,
            "cost_usd": 7.455,
            "uncached_cost_usd": 7.8,
            "saved_usd": 0.345,
        },
    }
    assert report_document(_golden_report()) == document


def test_ungrouped_table_is_one_total_line(sessions):
    text = to_table(cost_report(sessions, NOV_1, DEC_1, []))
    assert text.splitlines()[1:] == [
        "calls      input  cache read  cache write  1h write   output  reasoning  hit %  cost $"
        "  uncached $  saved $",
        "-----  ---------  ----------  -----------  --------  -------  ---------  -----  ------"
        "  ----------  -------",
        "    6  1,850,000   1,500,000      600,000         0  490,000     25,000   38.0    7.11"
        "       10.71     3.60",
    ]


def test_group_by_accepts_repeats_and_commas():
    assert parse_group_by(["tenant,day", "model", "tenant"]) == ("tenant", "day", "model")
    assert parse_group_by(None) == ()
    with pytest.raises(InvalidReportQuery) as refused:
        parse_group_by(["tenant,prompt"])
    assert refused.value.field == "group_by"


def test_period_defaults_and_inclusive_until_date():
    now = datetime(2026, 11, 17, 15, 4, 5, tzinfo=UTC)
    assert parse_period(None, None, now) == (NOV_1, now)
    assert parse_period("2026-11-01", "2026-11-30", now) == (NOV_1, DEC_1)
    assert parse_period("2026-11-01T06:00:00+02:00", "2026-11-02T00:00", now) == (
        datetime(2026, 11, 1, 4, 0, tzinfo=UTC),
        datetime(2026, 11, 2, tzinfo=UTC),
    )
    for since, until, field in (
        ("2026-11-05", "2026-11-04", "since"),
        ("yesterday", None, "since"),
        (None, "soon", "until"),
    ):
        with pytest.raises(InvalidReportQuery) as refused:
            parse_period(since, until, now)
        assert refused.value.field == field


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (None, "9999-12-31"),  # the day after it is no datetime
        (None, "9999-12-31T12:00:00"),
        ("0001-01-01T00:00:00+01:00", None),  # in UTC, before year 1
        (None, "9999-12-31T23:00:00-05:00"),  # in UTC, past year 9999
    ],
)
def test_a_period_past_what_a_datetime_holds_is_a_bad_query(since, until):
    now = datetime(2026, 11, 17, 15, 4, 5, tzinfo=UTC)
    with pytest.raises(InvalidReportQuery, match="since|until"):
        parse_period(since, until, now)
    assert parse_period(None, "9999-12-30", now) == (NOV_1, datetime(9999, 12, 31, tzinfo=UTC))


def test_a_session_id_that_reads_as_a_formula_is_text_in_the_csv():
    """Session ids are the clients' own: a spreadsheet opening the CSV ran `=...` as a formula."""
    hostile = ['=HYPERLINK("http://x")', "+1", "-2+3", "@SUM(A1)", "\tx", "s-1", "2026-11"]
    rows = tuple(
        CostRow(("acme", value), 1, 0, 0, 0, 0, money("-1"), money("0")) for value in hostile
    )
    totals = CostRow((), len(rows), 0, 0, 0, 0, money("-7"), money("0"))
    report = CostReport(NOV_1, DEC_1, ("tenant", "session"), rows, totals)
    lines = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert [line["session"] for line in lines] == [
        "'=HYPERLINK(\"http://x\")", "'+1", "'-2+3", "'@SUM(A1)", "'\tx", "s-1", "2026-11", "",
    ]  # fmt: skip
    assert {line["cost_usd"] for line in lines} == {"-1.00000000", "-7.00000000"}  # numbers kept


def test_report_by_key_session_and_month(sessions):
    report = cost_report(sessions, NOV_1, DEC_1, ["month", "key", "session"])
    assert [(r.group, r.num_calls, r.cost_usd) for r in report.rows][:2] == [
        (("2026-11", "key-1", "s-1"), 1, money("3.60")),
        (("2026-11", "key-2", "s-1"), 1, money("1.23")),
    ]
    assert sum(r.cost_usd for r in report.rows) == report.totals.cost_usd == money("7.11")


def test_focus_export_has_every_mandatory_column_and_the_ledgers_total(sessions):
    report = cost_report(sessions, NOV_1, DEC_1, FOCUS_GROUP_BY)
    lines = list(csv.DictReader(io.StringIO(to_focus_csv(report))))
    assert set(FOCUS_MANDATORY_COLUMNS) <= set(lines[0])
    assert len(FOCUS_MANDATORY_COLUMNS) == 21
    for line in lines:
        assert all(line[c] != "" for c in FOCUS_MANDATORY_COLUMNS if c != "ChargeClass")
        assert line["ChargeCategory"] == "Usage" and line["BillingCurrency"] == "USD"
        assert line["BillingPeriodStart"] == "2026-11-01T00:00:00Z"
        assert line["BillingPeriodEnd"] == "2026-12-01T00:00:00Z"
        assert line["ChargePeriodStart"][:10] == line["ChargePeriodEnd"][:10] or (
            line["ChargePeriodEnd"].endswith("T00:00:00Z")
        )
    assert sum(Decimal(line["BilledCost"]) for line in lines) == money("7.11")
    assert sum(Decimal(line["ListCost"]) for line in lines) == money("10.71")
    first = lines[0]
    assert (first["SubAccountId"], first["ResourceId"], first["SkuId"]) == (
        "acme",
        "acme/key-1",
        "claude-sonnet",
    )


def test_spend_view_equals_the_ledger_with_today_and_rows_written_late(sessions):
    """The console's spend series (whole days from the daily rollup, today's partial day from
    `usage`) over rows written after the rollup held their day, today's, and one after `now`."""
    now = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)  # 2026-11-03 is "today", a partial day
    late = [
        UsageRow(id=f"late-{n}", ts=ts, tenant=tenant, key_id="k", model="m", request_id=f"l{n}",
                 status="ok", cost_usd=Decimal(cost), uncached_cost_usd=Decimal(cost))
        for n, (ts, tenant, cost) in enumerate([
            (datetime(2026, 11, 1, 23, 59, 59, 999999, tzinfo=UTC), "acme", "0.00000001"),
            (datetime(2026, 11, 3, 0, 0, tzinfo=UTC), "globex", "0.12345678"),
            (datetime(2026, 11, 3, 11, 59, 59, tzinfo=UTC), "acme", "2.5"),
            (now, "acme", "100"),  # at `until`: outside the window
        ])
    ]  # fmt: skip
    insert_rows(sessions.kw["bind"], late)
    ledger: dict[tuple[str, str], Decimal] = {}
    for row in [*november_rows(), *edge_rows(), *late]:
        if NOV_1 <= row.ts < now:
            day = (row.ts.date().isoformat(), row.tenant)
            ledger[day] = ledger.get(day, Decimal(0)) + row.cost_usd
    series = spend_series(sessions, NOV_1, now, "tenant")
    drawn = {
        (day, tenant): amounts[i]
        for tenant, amounts in series.series.items()
        for i, day in enumerate(series.days)
        if (day, tenant) in ledger
    }
    assert drawn == ledger
    assert series.report.totals.cost_usd == sum(ledger.values())
    assert ledger[("2026-11-03", "acme")] == money("2.5")  # today's rows are in


def test_keep_warm_reads_are_a_line_of_their_own_by_door(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    read = UsageRow(
        id="00000000-0000-0000-0000-000000000099",
        ts=datetime(2026, 11, 1, 10, 9, tzinfo=UTC),
        tenant="acme",
        key_id="key-1",
        request_id="req-99",
        session_id="s-1",
        model="claude-sonnet",
        backend="anthropic",
        status="ok",
        latency_ms=300.0,
        cache_read_tokens=600_000,
        output_tokens=1,
        cost_usd=Decimal("0.180015"),
        uncached_cost_usd=Decimal("1.800015"),
        door="keep_warm",
    )
    insert_rows(engine, [*november_rows(), read])
    report = cost_report(session_factory(engine), NOV_1, DEC_1, ["door"])
    engine.dispose()
    assert [(r.group, r.num_calls, r.cost_usd) for r in report.rows] == [
        (("(none)",), 6, money("7.11")),
        (("keep_warm",), 1, money("0.180015")),
    ]


def _tool_row(n: int, tool: str, server: str, status: str) -> UsageRow:
    return UsageRow(
        id=f"00000000-0000-0000-0000-0000000001{n:02d}",
        ts=datetime(2026, 11, 2, 9, n, tzinfo=UTC),
        tenant="acme",
        key_id="key-1",
        request_id=f"mcp-{n}",
        session_id="run-1",
        model=tool,
        backend=server,
        status=status,
        latency_ms=12.0,
        cost_usd=Decimal(0),
        uncached_cost_usd=Decimal(0),
        door="mcp",
        kind="tool_call",
    )


def test_tool_calls_are_counted_by_server_and_tool(tmp_path):
    url = f"sqlite:///{tmp_path}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    tools = [
        _tool_row(1, "orders__lookup_order", "orders", "ok"),
        _tool_row(2, "run_python", "sandbox", "ok"),
        _tool_row(3, "orders__lookup_order", "orders", "error"),
    ]
    # the sandboxed run that call 2 started: billed, and not a second call of the door
    run = dataclasses.replace(
        _tool_row(4, "run_python", "sandbox:local", "ok"),
        kind="tool_run",
        cost_usd=Decimal("0.0063"),
        uncached_cost_usd=Decimal("0.0063"),
    )
    insert_rows(engine, [*november_rows(), *tools, run])
    sessions = session_factory(engine)
    report = cost_report(sessions, NOV_1, DEC_1, ["door"])
    counts = tool_call_counts(sessions, NOV_1, DEC_1)
    engine.dispose()
    assert [(r.group, r.num_calls, r.cost_usd) for r in report.rows] == [
        (("(none)",), 6, money("7.11")),
        (("mcp",), 4, money("0.0063")),
    ]
    assert counts == [
        ToolCallCount("orders", "orders__lookup_order", 2),
        ToolCallCount("sandbox", "run_python", 1),
    ]


def test_focus_bills_tool_runs_as_compute_counted_in_runs(tmp_path):
    """Two Fargate runs of one tool on one day (whole day: from the daily rollup): a compute
    charge of 2 runs at their cost, beside the token charges."""
    url = f"sqlite:///{tmp_path}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    runs = [
        dataclasses.replace(
            _tool_row(n, "render", "sandbox:fargate", "ok"),
            kind="tool_run",
            cost_usd=Decimal("0.00020571"),
            uncached_cost_usd=Decimal("0.00020571"),
            vcpu_seconds=15.0,
            gb_seconds=30.0,
        )
        for n in (1, 2)
    ]
    insert_rows(engine, [*november_rows(), *runs])
    report = cost_report(session_factory(engine), NOV_1, DEC_1, FOCUS_GROUP_BY)
    engine.dispose()
    lines = list(csv.DictReader(io.StringIO(to_focus_csv(report))))
    (run,) = [line for line in lines if line["SkuId"] == "render"]
    assert {k: run[k] for k in ("BilledCost", "ListCost", "PricingQuantity", "PricingUnit")} == {
        "BilledCost": "0.00041142",
        "ListCost": "0.00041142",
        "PricingQuantity": "2",
        "PricingUnit": "Runs",
    }
    assert (run["ServiceCategory"], run["ServiceName"], run["ConsumedUnit"]) == (
        "Compute",
        "Lantern tool sandbox",
        "Runs",
    )
    assert run["ChargeDescription"] == "render tool runs via sandbox:fargate for tenant acme"
    assert {line["PricingUnit"] for line in lines if line["SkuId"] != "render"} == {"Tokens"}
    assert sum(Decimal(line["BilledCost"]) for line in lines) == money("7.11") + money("0.00041142")
