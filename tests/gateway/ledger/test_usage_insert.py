"""The ledger's compiled insert stores what SQLAlchemy's own statement stores, on SQLite and
PostgreSQL, and a value its bind processing refuses is a row error (the recorder then retries
the batch row by row)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import StatementError

from gateway.ledger.models import USAGE_TABLE
from gateway.ledger.usage_insert import insert_rows, is_row_error


def _varied_rows(make_row):
    """Rows covering every kind of value: nulls, exact money, a non-UTC time, the bounds."""
    return [
        make_row(),
        make_row(
            ts=datetime(2026, 11, 3, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
            session_id=None,
            backend=None,
            replica="http://r1",
            attempt=3,
            status="error",
            error_kind="Timeout",
            cost_usd=Decimal("9999999999.99999999"),
            uncached_cost_usd=0.1 + 0.2,
            cache_saved_usd=0.00000001,
            cache_premium_usd=Decimal("0.123456785"),
            cache_lost_usd=-0.0,
            ttft_ms=None,
            latency_ms=0.0,
            cache_diagnosis='{"verdict":"miss","é":1}',
            door="messages",
            cache_cause="ttl",
            queue_ms=12.5,
            input_tokens=2**63 - 1,
        ),
        make_row(tenant="globex", key_id="k" * 128, model="m" * 256, output_tokens=0),
    ]


def _stored(engine) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with engine.connect() as connection:
        usage = connection.exec_driver_sql("SELECT * FROM usage ORDER BY id").all()
        daily = connection.exec_driver_sql("SELECT * FROM usage_daily ORDER BY 1, 2, 3, 4, 5").all()
    return [tuple(r) for r in usage], [tuple(r) for r in daily]


def test_the_compiled_insert_stores_what_sqlalchemy_stores(engine, make_row):
    rows = _varied_rows(make_row)
    insert_rows(engine, rows)
    insert_rows(engine, rows[:2])  # written twice: stored (and summed) once
    ours = _stored(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM usage")
        connection.exec_driver_sql("DELETE FROM usage_daily")
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(USAGE_TABLE).on_conflict_do_nothing(index_elements=["id"])
    with engine.begin() as connection:
        connection.execute(statement, [row.to_values() for row in rows])
    assert _stored(engine) == ours
    assert (len(ours[0]), len(ours[1])) == (3, 3)


def test_a_value_bind_processing_refuses_is_a_row_error(engine, make_row):
    row = make_row()
    object.__setattr__(row, "ts", datetime(2026, 11, 3, 9, 30))  # naive: UtcDateTime refuses
    with pytest.raises(StatementError) as caught:
        insert_rows(engine, [make_row(), row])
    assert is_row_error(caught.value)
