"""The schema comes from Alembic on both dialects, matches the models, and holds no text."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.orm import Session

from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import Base, UsageRecord, UsageRow
from gateway.ledger.usage_insert import insert_rows

EXPECTED_COLUMNS = {
    "id",
    "ts",
    "tenant",
    "key_id",
    "session_id",
    "model",
    "backend",
    "replica",
    "attempt",
    "status",
    "error_kind",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "uncached_cost_usd",
    "ttft_ms",
    "latency_ms",
    "cache_diagnosis",
    "request_id",
    "door",
    "cache_saved_usd",
    "cache_premium_usd",
    "cache_lost_usd",
    "cache_cause",
    "queue_ms",
    "cache_write_1h_tokens",
    "reasoning_tokens",
    "kind",
    "vcpu_seconds",
    "gb_seconds",
}


def test_migration_creates_exactly_the_usage_columns(engine):
    inspector = sa.inspect(engine)
    columns = {c["name"]: c for c in inspector.get_columns("usage")}
    assert set(columns) == EXPECTED_COLUMNS
    # No column can hold prompt or completion text: the one unbounded text column is the
    # cache diagnosis (small JSON of hashes and counts, size-checked by UsageRow).
    unbounded = {n for n, c in columns.items() if isinstance(c["type"], sa.Text)}
    assert unbounded == {"cache_diagnosis"}
    assert {ix["name"] for ix in inspector.get_indexes("usage")} == {
        "ix_usage_ts",
        "ix_usage_tenant_ts",
        "ix_usage_key_ts",
        "ix_usage_model_ts",
        "ix_usage_tenant_session",
    }
    assert inspector.get_pk_constraint("usage")["constrained_columns"] == ["id"]
    with engine.connect() as connection:
        assert (
            connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
            == "0010"
        )


def test_models_match_the_migration(engine):
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


def test_migrate_is_idempotent(database_url, engine, make_row, count_rows):
    insert_rows(engine, [make_row()])
    migrate(database_url)
    assert count_rows(engine) == 1


def test_insert_twice_keeps_one_row_and_exact_values(engine, make_row, count_rows):
    row = make_row(
        cost_usd=Decimal("0.12345678"), uncached_cost_usd=0.3, cache_diagnosis='{"miss": 1}'
    )
    insert_rows(engine, [row])
    insert_rows(engine, [row, make_row()])
    assert count_rows(engine) == 2
    with engine.connect() as connection:
        stored = connection.execute(
            sa.text(
                "SELECT ts, cost_usd, uncached_cost_usd, cache_diagnosis FROM usage WHERE id = :id"
            ),
            {"id": row.id},
        ).one()
    assert Decimal(str(stored.cost_usd)).quantize(Decimal("1e-8")) == Decimal("0.12345678")
    assert Decimal(str(stored.uncached_cost_usd)).quantize(Decimal("1e-8")) == Decimal("0.3")
    assert stored.cache_diagnosis == '{"miss": 1}'


def test_usage_row_round_trips_through_json(make_row):
    row = make_row(
        cost_usd=0.1, replica="http://r1", attempt=2, cache_diagnosis='{"a":1}', ttft_ms=None
    )
    assert UsageRow.from_json(row.to_json()) == row
    assert row.cost_usd == Decimal("0.10000000")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status", "weird"),
        ("input_tokens", -1),
        ("cost_usd", -0.01),
        ("cost_usd", float("nan")),
        ("tenant", "t" * 129),
        ("cache_diagnosis", "not json"),
        ("cache_diagnosis", '"' + "x" * 9000 + '"'),
        ("ts", datetime(2026, 11, 1)),
        ("tenant", "ac\x00me"),
        ("key_id", None),
        ("model", 7),
        ("latency_ms", float("nan")),
        ("ttft_ms", float("inf")),
        ("output_tokens", 2**63),
        ("attempt", True),
        ("attempt", 2**31),
        ("cost_usd", "ten dollars"),
        ("cost_usd", Decimal("1e10")),
    ],
)
def test_usage_row_rejects_what_the_table_cannot_take(make_row, field, value):
    with pytest.raises(ValueError):
        make_row(**{field: value})


def test_timestamps_come_back_as_utc(engine, make_row):
    local = datetime(2026, 11, 3, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    insert_rows(engine, [make_row(ts=local)])
    with Session(engine) as session:
        record = session.scalars(sa.select(UsageRecord)).one()
    assert record.ts == datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


def test_the_largest_valid_row_is_stored(engine, make_row):
    row = make_row(
        id="f" * 36,
        tenant="t" * 128,
        key_id="k" * 128,
        session_id="s" * 256,
        model="m" * 256,
        backend="b" * 128,
        replica="r" * 512,
        error_kind="e" * 64,
        request_id="q" * 128,
        input_tokens=2**63 - 1,
        output_tokens=2**63 - 1,
        attempt=2**31 - 1,
        cost_usd=Decimal("9999999999.99999999"),
        cache_diagnosis='{"x":"' + "y" * 8000 + '"}',
    )
    insert_rows(engine, [row])
    with Session(engine) as session:
        record = session.scalars(sa.select(UsageRecord)).one()
    assert (record.tenant, record.replica, record.input_tokens, record.attempt) == (
        "t" * 128,
        "r" * 512,
        2**63 - 1,
        2**31 - 1,
    )
    assert record.cache_diagnosis == row.cache_diagnosis


def test_processes_starting_together_migrate_one_at_a_time(database_url):
    errors: list[BaseException] = []

    def start_up() -> None:
        try:
            migrate(database_url)
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=start_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    engine = create_ledger_engine(database_url)
    with engine.connect() as connection:
        assert connection.execute(
            sa.text("SELECT version_num FROM alembic_version")
        ).scalars().all() == ["0010"]
    engine.dispose()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key_id": None}, "UsageRow.key_id is required"),
        ({"tenant": "ac\x00me"}, "UsageRow.tenant must be text without NUL characters"),
        ({"tenant": "t" * 129}, "UsageRow.tenant is longer than 128 characters"),
        ({"attempt": True}, "UsageRow.attempt must be an integer in [0, 2147483648)"),
        ({"output_tokens": -1}, f"UsageRow.output_tokens must be an integer in [0, {2**63})"),
        ({"latency_ms": float("nan")}, "UsageRow.latency_ms must be a finite number >= 0"),
        # the first broken column in the table's order is the one named
        ({"model": 7, "tenant": None}, "UsageRow.tenant is required"),
    ],
)
def test_usage_row_names_the_broken_column(make_row, fields, message):
    with pytest.raises(ValueError) as raised:
        make_row(**fields)
    assert str(raised.value) == message
