"""usage_daily: the ledger summed per UTC day, tenant, model, backend and key, kept by triggers
on `usage` in the transaction that inserts (deletes, updates) the rows, so reports read whole
days from it

The triggers' SQL: gateway/ledger/rollup_sql.py (money in integer 1e-8 dollar units; a retried
insert counted once). The upgrade fills the table from the rows already in `usage`.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gateway.ledger.rollup_sql import RollupSql, drop_triggers

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ROLLUP = RollupSql(("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"))


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("backend", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("num_calls", sa.BigInteger(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False) for c in ROLLUP.sums),
        sa.Column("cost_e8", sa.BigInteger(), nullable=False),
        sa.Column("uncached_cost_e8", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "tenant", "model", "backend", "key_id"),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        # room on every page, so the triggers' updates stay on their page (HOT: no new index
        # entries, dead versions pruned as the page is read)
        op.execute("ALTER TABLE usage_daily SET (fillfactor = 50)")
    ROLLUP.create_triggers(op.execute, postgres)  # first: on PostgreSQL they lock out inserts
    op.execute(ROLLUP.backfill(postgres))


def downgrade() -> None:
    drop_triggers(op.execute, op.get_bind().dialect.name == "postgresql")
    op.drop_table("usage_daily")
