"""`lantern report cost` and `lantern report breakeven` handlers against a real SQLite ledger."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from gateway.cli.main import build_parser
from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows
from gateway.reports.breakeven import add_breakeven_arguments, bounded
from gateway.reports.cost import add_cost_arguments, cli_breakeven, cli_cost
from gateway.settings import Settings
from routing.breakeven import (
    ApiPrices,
    ModelAggregates,
    TokenCounts,
    breakeven_report,
    format_breakeven,
)
from tests.gateway.ledger.ledger_dataset import edge_rows, november_rows


@dataclass(frozen=True)
class FakeSettings:
    database_url: str


@pytest.fixture
def settings(tmp_path) -> FakeSettings:
    url = f"sqlite:///{tmp_path}/var/lantern.db"
    migrate(url)
    engine = create_ledger_engine(url)
    insert_rows(engine, [*november_rows(), *edge_rows()])
    engine.dispose()
    return FakeSettings(url)


def cost_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cost_arguments(parser)
    return parser.parse_args(list(argv))


def test_cost_csv_by_tenant_and_model(settings, capsys):
    args = cost_args(
        "--since",
        "2026-11-01",
        "--until",
        "2026-11-30",
        "--group-by",
        "tenant",
        "--group-by",
        "model",
        "--format",
        "csv",
    )
    assert cli_cost(args, settings) == 0
    assert capsys.readouterr().out == (
        "period_start,period_end,tenant,model,num_calls,input_tokens,cache_read_tokens,"
        "cache_write_tokens,cache_write_1h_tokens,output_tokens,reasoning_tokens,cache_hit_ratio,"
        "cost_usd,uncached_cost_usd,saved_usd\n"
        "2026-11-01T00:00:00+00:00,2026-12-01T00:00:00+00:00,acme,claude-sonnet,2,350000,600000,600000,0,90000,0,0.3871,"
        "4.83000000,6.00000000,1.17000000\n"
        "2026-11-01T00:00:00+00:00,2026-12-01T00:00:00+00:00,acme,gpt-4o-mini,1,1000000,0,0,0,100000,25000,0.0000,0.21000000,0.21000000,0.00000000\n"
        "2026-11-01T00:00:00+00:00,2026-12-01T00:00:00+00:00,globex,claude-sonnet,2,100000,900000,0,0,100000,0,0.9000,"
        "2.07000000,4.50000000,2.43000000\n"
        "2026-11-01T00:00:00+00:00,2026-12-01T00:00:00+00:00,globex,gpt-4o-mini,1,400000,0,0,0,200000,0,0.0000,0.00000000,0.00000000,0.00000000\n"
        "2026-11-01T00:00:00+00:00,2026-12-01T00:00:00+00:00,TOTAL,,6,1850000,1500000,600000,0,490000,25000,0.3797,7.11000000,10.71000000,3.60000000\n"
    )


def test_cost_groups_by_tenant_by_default(settings, capsys):
    assert cli_cost(cost_args("--since", "2026-11-01", "--until", "2026-11-30"), settings) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [
        ["tenant", "calls"],
        ["------", "-----"],
        ["acme", "3"],
        ["globex", "3"],
        ["------", "-----"],
        ["TOTAL", "6"],
    ]


def test_cost_json_with_comma_separated_keys(settings, capsys):
    args = cost_args(
        "--since",
        "2026-11-01",
        "--until",
        "2026-12-01T00:00:00Z",
        "--group-by",
        "backend,day",
        "--format",
        "json",
    )
    assert cli_cost(args, settings) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["group_by"] == ["backend", "day"]
    assert [(r["backend"], r["day"], r["cost_usd"]) for r in document["rows"]] == [
        ("(none)", "2026-11-02", 0.0),
        ("anthropic", "2026-11-01", 4.83),
        ("bedrock", "2026-11-02", 2.07),
        ("openai", "2026-11-02", 0.21),
        ("selfhost", "2026-11-03", 0.0),
    ]
    assert (document["totals"]["cost_usd"], document["totals"]["saved_usd"]) == (7.11, 3.6)


def test_cost_bad_arguments_exit_2(settings, capsys):
    assert cli_cost(cost_args("--group-by", "prompt"), settings) == 2
    assert "unknown group-by key 'prompt'" in capsys.readouterr().err
    assert cli_cost(cost_args("--since", "2026-12-01", "--until", "2026-11-01"), settings) == 2


def test_cost_on_a_ledger_without_schema_exits_1(tmp_path, capsys):
    settings = FakeSettings(f"sqlite:///{tmp_path}/empty.db")
    assert cli_cost(cost_args("--since", "2026-11-01"), settings) == 1
    assert "cannot read the ledger" in capsys.readouterr().err


def breakeven_settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        models=[
            {
                "name": "gpt-4o-mini",
                "backends": [
                    {
                        "kind": "selfhost",
                        "name": "local",
                        "base_url": "http://10.0.0.7:8091",
                        "price_per_hour_usd": 0.5,
                    },
                    {"kind": "litellm", "name": "oai", "model": "openai/gpt-4o-mini"},
                ],
            }
        ],
        prices={"gpt-4o-mini": {"input": 0.15, "output": 0.60}},
    )


def breakeven_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_breakeven_arguments(parser)
    return parser.parse_args(["--since", "2026-11-01", "--until", "2026-11-30", *argv])


def expected_report(mtok_per_h: float):
    return bounded(
        breakeven_report(
            ModelAggregates(
                model="gpt-4o-mini",
                hours=1.0,  # the one UTC hour the replica served, not the 29-day window
                replicas=1,
                replica_usd_per_h=0.5,
                mtok_per_h_full=mtok_per_h,
                fleet=TokenCounts(input_tokens=400_000, output_tokens=200_000),  # the replica's row
                api=TokenCounts(input_tokens=1_000_000, output_tokens=100_000),  # the OpenAI row
                api_prices=ApiPrices(0.15, 0.60),
            )
        )
    )


def test_breakeven_splits_fleet_and_api_traffic(settings, capsys):
    args = breakeven_args("--mtok-per-h", "1.0")
    assert cli_breakeven(args, breakeven_settings(settings.database_url)) == 0
    expected = expected_report(1.0)
    assert expected.utilisation == pytest.approx(0.6)
    assert expected.all_api_cost_usd == pytest.approx(0.39)
    captured = capsys.readouterr()
    assert captured.out == format_breakeven([expected]) + "\n"
    assert captured.err == ""


def test_breakeven_without_capacity_uses_the_busiest_hour_and_says_so(settings, capsys):
    assert (
        cli_breakeven(breakeven_args("--format", "json"), breakeven_settings(settings.database_url))
        == 0
    )
    captured = capsys.readouterr()
    [document] = json.loads(captured.out)
    expected = expected_report(0.6)  # the replica's one hour: 400k + 200k work tokens
    assert document["u_star"] == pytest.approx(expected.u_star)
    assert document["formula"] == expected.formula
    assert "busiest hour served (a lower bound)" in captured.err


def test_breakeven_with_the_parser_of_the_lantern_cli(settings, capsys):
    """gateway/cli/main.py's parser wires --model, --mtok-per-h and --headroom."""
    args = build_parser().parse_args(
        [
            "report", "breakeven", "--since", "2026-11-01", "--until", "2026-11-30",
            "--format", "csv", "--model", "gpt-4o-mini", "--mtok-per-h", "2", "--headroom", "0.5",
        ]
    )  # fmt: skip
    assert cli_breakeven(args, breakeven_settings(settings.database_url)) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split(",")[:4] == ["model", "hours", "replicas", "utilisation"]
    assert row.split(",")[:4] == ["gpt-4o-mini", "1.0", "1", "0.3"]  # 0.6 Mtok / (1 h x 2)


def test_breakeven_rejects_an_unknown_model_and_bad_options(settings, capsys):
    configured = breakeven_settings(settings.database_url)
    assert cli_breakeven(breakeven_args("--model", "gpt-5"), configured) == 2
    assert "use one of: gpt-4o-mini" in capsys.readouterr().err
    assert cli_breakeven(breakeven_args("--headroom", "1.5"), configured) == 2
    assert "--headroom must be in (0, 1]" in capsys.readouterr().err


def test_breakeven_reproduces_the_notes_u_star_on_a_seeded_fleet(tmp_path, capsys):
    """F2: a $12/h replica, $2 per Mtok at the API, 38.3 Mtok/h at full use: u* = 0.16. The
    fleet served 10 hours of a 30-day window at 9.575 Mtok/h: u = 0.25, charged 10 h only."""
    url = f"sqlite:///{tmp_path}/f2.db"
    migrate(url)
    engine = create_ledger_engine(url)
    rows = [
        UsageRow(
            id=f"00000000-0000-0000-0000-{hour:012d}",
            ts=datetime(2026, 11, 2, hour, 30, tzinfo=UTC),
            tenant="acme",
            key_id="k1",
            model="note-model",
            request_id=f"r{hour}",
            status="ok",
            backend="gpu",
            replica="http://gpu-1:8000/v1",
            input_tokens=7_575_000,
            output_tokens=2_000_000,
            cost_usd="19.15",
            uncached_cost_usd="19.15",
        )
        for hour in range(10)
    ]
    insert_rows(engine, rows)
    engine.dispose()
    note = Settings(
        database_url=url,
        models=[
            {
                "name": "note-model",
                "backends": [
                    {
                        "kind": "openai_compatible",
                        "name": "gpu",
                        "base_url": "http://gpu-1:8000/v1",
                        "model": "note-model",
                        "price_per_hour_usd": 12,
                    }
                ],
            }
        ],
        prices={"note-model": {"input": 2.0, "output": 2.0}},
    )
    args = breakeven_args("--mtok-per-h", "38.3", "--format", "json")
    assert cli_breakeven(args, note) == 0
    [document] = json.loads(capsys.readouterr().out)
    assert round(document["u_star"], 2) == 0.16
    assert document["u_star"] == pytest.approx(12 / (2.0 * 38.3))
    assert document["utilisation"] == pytest.approx(0.25)
    assert document["hours"] == 10.0
    assert document["actual_cost_usd"] == pytest.approx(120.0)  # 10 served hours x $12
    assert document["all_api_cost_usd"] == pytest.approx(191.5)  # 95.75 Mtok x $2
    assert document["advice"] == "stay"


def test_breakeven_needs_a_priced_fleet(settings, capsys):
    plain = Settings(database_url=settings.database_url)
    assert cli_breakeven(breakeven_args(), plain) == 2
    assert "price_per_hour_usd" in capsys.readouterr().err
