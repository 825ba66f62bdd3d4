"""usage and usage_daily: cache_write_1h_tokens and reasoning_tokens, the token kinds providers
bill or report apart (of cache writes, those at the 1 h TTL; of output, those spent reasoning)

Both are parts of a column the ledger already has (cache_write_tokens, output_tokens), so no
sum changes meaning; rows stored before read 0. The rollup's triggers are made again with the
two sums.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gateway.ledger.rollup_sql import RollupSql, drop_triggers

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BEFORE = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
ADDED = ("cache_write_1h_tokens", "reasoning_tokens")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    drop_triggers(op.execute, postgres)  # first: no insert may miss the new sums' trigger
    for table in ("usage", "usage_daily"):
        for name in ADDED:
            op.add_column(
                table, sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
            )
    RollupSql((*BEFORE, *ADDED)).create_triggers(op.execute, postgres)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    drop_triggers(op.execute, postgres)
    for table in ("usage", "usage_daily"):
        with op.batch_alter_table(table) as batch:
            for name in ADDED:
                batch.drop_column(name)
    RollupSql(BEFORE).create_triggers(op.execute, postgres)
