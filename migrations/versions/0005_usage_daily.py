"""usage_daily: the ledger summed per UTC day, tenant, model, backend and key, kept by triggers
on `usage` in the transaction that inserts the rows, so reports read whole days from it

Money is summed in integer units of 1e-8 dollars (the ledger's precision), exact on every
dialect. A row skipped by `ON CONFLICT DO NOTHING` (a retried insert) fires no trigger, so it
is counted once. The upgrade fills the table from the rows already in `usage`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_SUMS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
_MONEY = ("cost_usd", "uncached_cost_usd")  # summed into cost_e8, uncached_cost_e8
_KEYS = "day, tenant, model, backend, key_id"
_COLUMNS = f"{_KEYS}, num_calls, {', '.join(_SUMS)}, cost_e8, uncached_cost_e8"
_ADD = ", ".join(
    f"{c} = usage_daily.{c} + excluded.{c}"
    for c in ("num_calls", *_SUMS, "cost_e8", "uncached_cost_e8")
)


def _grouped_select(source: str, day: str, units: str) -> str:
    """Sums of `source`'s rows per rollup key (the backfill and PostgreSQL's trigger)."""
    sums = ", ".join(f"sum({c})" for c in _SUMS)
    money = ", ".join(f"sum({units.format(c)})" for c in _MONEY)
    return (
        f"SELECT {day}, tenant, model, coalesce(backend, '(none)'), key_id, count(*), "
        f"{sums}, {money} FROM {source} GROUP BY 1, 2, 3, 4, 5"
    )


_PG_UNITS = "round({} * 100000000)::bigint"
_PG_FUNCTION = f"""
CREATE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_daily ({_COLUMNS})
    {_grouped_select("inserted", "ts::date", _PG_UNITS)} ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT ({_KEYS}) DO UPDATE SET {_ADD};
    RETURN NULL;
END
$$
"""
_PG_TRIGGER = (
    "CREATE TRIGGER usage_daily_insert AFTER INSERT ON usage REFERENCING NEW TABLE AS inserted "
    "FOR EACH STATEMENT EXECUTE FUNCTION usage_daily_add()"
)
_SQLITE_UNITS = "CAST(round({} * 100000000) AS INTEGER)"
_SQLITE_TRIGGER = f"""
CREATE TRIGGER usage_daily_insert AFTER INSERT ON usage FOR EACH ROW BEGIN
    INSERT INTO usage_daily ({_COLUMNS})
    VALUES (date(NEW.ts), NEW.tenant, NEW.model, coalesce(NEW.backend, '(none)'), NEW.key_id, 1,
            {", ".join(f"NEW.{c}" for c in _SUMS)},
            {", ".join(_SQLITE_UNITS.format(f"NEW.{c}") for c in _MONEY)})
    ON CONFLICT ({_KEYS}) DO UPDATE SET {_ADD};
END
"""


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("backend", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("num_calls", sa.BigInteger(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False) for c in _SUMS),
        sa.Column("cost_e8", sa.BigInteger(), nullable=False),
        sa.Column("uncached_cost_e8", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tenant", "model", "backend", "key_id"),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)  # before the backfill: it locks out concurrent inserts
        backfill = _grouped_select("usage", "ts::date", _PG_UNITS)
    else:
        op.execute(_SQLITE_TRIGGER)
        backfill = _grouped_select("usage", "date(ts)", _SQLITE_UNITS)
    op.execute(f"INSERT INTO usage_daily ({_COLUMNS}) {backfill}")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS usage_daily_insert" + (
        " ON usage" if op.get_bind().dialect.name == "postgresql" else ""
    ))  # fmt: skip
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS usage_daily_add()")
    op.drop_table("usage_daily")
