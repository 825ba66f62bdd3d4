"""usage_daily: the ledger summed per UTC day, tenant, model, backend and key, kept by triggers
on `usage` in the transaction that inserts (deletes, updates) the rows, so reports read whole
days from it

Money is summed in integer units of 1e-8 dollars (the ledger's precision), exact on every
dialect. A row skipped by `ON CONFLICT DO NOTHING` (a retried insert) fires no trigger, so it
is counted once. A group whose rows were all deleted stays with zero calls (reports skip it).
The upgrade fills the table from the rows already in `usage`.

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
_MONEY = {"cost_e8": "cost_usd", "uncached_cost_e8": "uncached_cost_usd"}
_KEYS = ("day", "tenant", "model", "backend", "key_id")
_COUNTS = ("num_calls", *_SUMS, *_MONEY)
_COLUMNS = ", ".join((*_KEYS, *_COUNTS))
_ADD = ", ".join(f"{c} = usage_daily.{c} + excluded.{c}" for c in _COUNTS)
_PG_UNITS = "round({} * 100000000)::bigint"
_SQLITE_UNITS = "CAST(round({} * 100000000) AS INTEGER)"


def _grouped_select(source: str, day: str, units: str) -> str:
    """Sums of `source`'s rows per rollup key, named as usage_daily's columns (the backfill
    and PostgreSQL's triggers)."""
    sums = ", ".join(f"sum({c}) AS {c}" for c in _SUMS)
    money = ", ".join(f"sum({units.format(c)}) AS {name}" for name, c in _MONEY.items())
    return (
        f"SELECT {day} AS day, tenant, model, coalesce(backend, '(none)') AS backend, key_id, "
        f"count(*) AS num_calls, {sums}, {money} FROM {source} GROUP BY 1, 2, 3, 4, 5"
    )


_PG_ADD = f"""
    INSERT INTO usage_daily ({_COLUMNS})
    {_grouped_select("inserted", "ts::date", _PG_UNITS)} ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT ({", ".join(_KEYS)}) DO UPDATE SET {_ADD};"""
_PG_REMOVE = f"""
    UPDATE usage_daily AS d SET {", ".join(f"{c} = d.{c} - r.{c}" for c in _COUNTS)}
    FROM ({_grouped_select("removed", "ts::date", _PG_UNITS)}) AS r
    WHERE {" AND ".join(f"d.{k} = r.{k}" for k in _KEYS)};"""
# (function, its body, the trigger's event, its transition tables)
_PG_TRIGGERS = (
    ("usage_daily_add", _PG_ADD, "INSERT", "NEW TABLE AS inserted"),
    ("usage_daily_remove", _PG_REMOVE, "DELETE", "OLD TABLE AS removed"),
    (
        "usage_daily_change",
        _PG_REMOVE + _PG_ADD,
        "UPDATE",
        "OLD TABLE AS removed NEW TABLE AS inserted",
    ),
)
_SQLITE_ADD = f"""
    INSERT INTO usage_daily ({_COLUMNS})
    VALUES (date(NEW.ts), NEW.tenant, NEW.model, coalesce(NEW.backend, '(none)'), NEW.key_id, 1,
            {", ".join(f"NEW.{c}" for c in _SUMS)},
            {", ".join(_SQLITE_UNITS.format(f"NEW.{c}") for c in _MONEY.values())})
    ON CONFLICT ({", ".join(_KEYS)}) DO UPDATE SET {_ADD};"""
_SQLITE_REMOVE = f"""
    UPDATE usage_daily SET num_calls = num_calls - 1,
        {", ".join(f"{c} = {c} - OLD.{c}" for c in _SUMS)},
        {", ".join(f"{n} = {n} - {_SQLITE_UNITS.format(f'OLD.{c}')}" for n, c in _MONEY.items())}
    WHERE day = date(OLD.ts) AND tenant = OLD.tenant AND model = OLD.model
        AND backend = coalesce(OLD.backend, '(none)') AND key_id = OLD.key_id;"""
_SQLITE_TRIGGERS = (
    ("usage_daily_add", "INSERT", _SQLITE_ADD),
    ("usage_daily_remove", "DELETE", _SQLITE_REMOVE),
    ("usage_daily_change", "UPDATE", _SQLITE_REMOVE + _SQLITE_ADD),
)


def _create_triggers(postgres: bool) -> None:
    """Insert, delete and update on `usage` each carried into usage_daily."""
    if not postgres:
        for name, event, body in _SQLITE_TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON usage FOR EACH ROW BEGIN{body}\nEND"
            )
        return
    for name, body, event, tables in _PG_TRIGGERS:
        op.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN{body}\n"
            "    RETURN NULL;\nEND\n$$"
        )
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event} ON usage REFERENCING {tables} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
        )


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
        # room on every page, so the triggers' updates stay on their page (HOT: no new index
        # entries, dead versions pruned as the page is read)
        op.execute("ALTER TABLE usage_daily SET (fillfactor = 50)")
    _create_triggers(postgres)  # first: on PostgreSQL they lock out concurrent inserts
    day, units = ("ts::date", _PG_UNITS) if postgres else ("date(ts)", _SQLITE_UNITS)
    op.execute(f"INSERT INTO usage_daily ({_COLUMNS}) {_grouped_select('usage', day, units)}")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, *_ in _SQLITE_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON usage" if postgres else ""))
        if postgres:
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_table("usage_daily")
