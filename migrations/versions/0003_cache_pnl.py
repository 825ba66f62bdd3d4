"""usage: the call's cache profit and loss (money saved by reads, write premiums, money lost to a
cache break and its cause)

Revision ID: 0003
Revises: 0002_usage_door
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002_usage_door"
branch_labels = None
depends_on = None

MONEY = ("cache_saved_usd", "cache_premium_usd", "cache_lost_usd")


def upgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        for name in MONEY:
            batch.add_column(
                sa.Column(name, sa.Numeric(18, 8), nullable=False, server_default="0")
            )
        batch.add_column(sa.Column("cache_cause", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("cache_cause")
        for name in reversed(MONEY):
            batch.drop_column(name)
