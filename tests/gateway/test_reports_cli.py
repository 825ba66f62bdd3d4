"""`lantern report cost` and `lantern report breakeven` handlers against a real SQLite ledger."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import pytest

from adapters.breakeven import (
    ApiPrices,
    ModelAggregates,
    TokenCounts,
    breakeven_report,
    format_breakeven,
)
from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.recorder import insert_rows
from gateway.reports import add_breakeven_arguments, add_cost_arguments, cli_breakeven, cli_cost
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
        "tenant,model,num_calls,input_tokens,cache_read_tokens,cache_write_tokens,output_tokens,"
        "cache_hit_ratio,cost_usd,uncached_cost_usd,saved_usd\n"
        "acme,claude-sonnet,2,350000,600000,600000,90000,0.3871,4.83000000,6.00000000,1.17000000\n"
        "acme,gpt-4o-mini,1,1000000,0,0,100000,0.0000,0.21000000,0.21000000,0.00000000\n"
        "globex,claude-sonnet,2,100000,900000,0,100000,0.9000,2.07000000,4.50000000,2.43000000\n"
        "globex,gpt-4o-mini,1,400000,0,0,200000,0.0000,0.00000000,0.00000000,0.00000000\n"
    )


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


def test_breakeven_splits_fleet_and_api_traffic(settings, capsys):
    parser = argparse.ArgumentParser()
    add_breakeven_arguments(parser)
    args = parser.parse_args(
        [
            "--since",
            "2026-11-01",
            "--until",
            "2026-11-30",
            "--model",
            "gpt-4o-mini",
            "--replicas",
            "1",
            "--replica-usd-per-h",
            "0.5",
            "--mtok-per-h",
            "1.0",
            "--api-input",
            "0.15",
            "--api-output",
            "0.60",
        ]
    )
    assert cli_breakeven(args, settings) == 0
    expected = breakeven_report(
        ModelAggregates(
            model="gpt-4o-mini",
            hours=720.0,
            replicas=1,
            replica_usd_per_h=0.5,
            mtok_per_h_full=1.0,
            fleet=TokenCounts(input_tokens=400_000, output_tokens=200_000),  # the replica's row
            api=TokenCounts(input_tokens=1_000_000, output_tokens=100_000),  # the OpenAI row
            api_prices=ApiPrices(0.15, 0.60),
        )
    )
    assert expected.utilisation == pytest.approx(0.6 / 720)
    assert expected.all_api_cost_usd == pytest.approx(0.39)
    assert capsys.readouterr().out == format_breakeven([expected]) + "\n"
