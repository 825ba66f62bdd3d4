"""Migration 0010 (`usage.kind`, `vcpu_seconds`, `gb_seconds`) on SQLite and PostgreSQL: rows
stored before keep their values and get their kind (the MCP door's rows `tool_call`), the rollup
still sums them, and a downgrade gives the 0009 table back."""

from __future__ import annotations

from decimal import Decimal

import pytest
import sqlalchemy as sa
from alembic import command

from gateway.ledger.db import alembic_config, create_ledger_engine, migrate
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows


def _insert_at_0009(engine: sa.Engine, rows: list[UsageRow]) -> None:
    table = sa.Table("usage", sa.MetaData(), autoload_with=engine)
    values = [{k: v for k, v in row.to_values().items() if k in table.c} for row in rows]
    with engine.begin() as connection:
        connection.execute(table.insert(), values)


def test_rows_stored_before_get_their_kind_and_keep_their_sums(database_url, make_row):
    migrate(database_url, "0009")
    engine = create_ledger_engine(database_url)
    model = make_row(door="chat.completions", cost_usd=Decimal("0.25"))
    mcp = make_row(door="mcp", model="search", backend="sandbox", cost_usd=Decimal(0))
    _insert_at_0009(engine, [model, mcp])
    migrate(database_url)
    run = make_row(
        kind="tool_run",
        model="render",
        backend="sandbox:local",
        cost_usd=Decimal("0.125"),
        vcpu_seconds=2.0,
        gb_seconds=0.5,
    )
    insert_rows(engine, [run])
    query = "SELECT id, kind, vcpu_seconds, gb_seconds FROM usage ORDER BY id"
    with engine.connect() as db:
        stored = [tuple(r) for r in db.execute(sa.text(query))]
        daily = db.execute(sa.text("SELECT sum(num_calls), sum(cost_e8) FROM usage_daily")).one()
    assert stored == [
        (model.id, "model_call", None, None),
        (mcp.id, "tool_call", None, None),
        (run.id, "tool_run", 2.0, 0.5),
    ]
    assert (int(daily[0]), int(daily[1])) == (3, 37_500_000)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0009")
    columns = {c["name"] for c in sa.inspect(engine).get_columns("usage")}
    assert not columns & {"kind", "vcpu_seconds", "gb_seconds"}
    engine.dispose()


@pytest.mark.parametrize("kind", ["model", "", "tool-run"])
def test_a_row_of_an_unknown_kind_is_refused(make_row, kind):
    with pytest.raises(ValueError, match="UsageRow.kind must be one of"):
        make_row(kind=kind)


def test_a_call_line_of_the_mcp_door_reads_as_a_tool_call(make_row):
    """The pipeline's and the MCP door's lines name no kind (nothing added to a call's line):
    the writer reads the MCP door's as tool calls."""
    line = make_row(door="mcp").to_line().replace(b',"kind":"model_call"', b"")
    assert b'"kind"' not in line
    assert UsageRow.from_line(line).kind == "tool_call"
    other = make_row(door="messages").to_line().replace(b',"kind":"model_call"', b"")
    assert UsageRow.from_line(other).kind == "model_call"
