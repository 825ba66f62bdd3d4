"""usage: one row per backend call (counts, money, timings; never prompt or completion text)

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("ts", sa.DateTime(), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(256), nullable=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("backend", sa.String(128), nullable=True),
        sa.Column("replica", sa.String(512), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("error_kind", sa.String(64), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(18, 8), nullable=False),
        sa.Column("uncached_cost_usd", sa.Numeric(18, 8), nullable=False),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("cache_diagnosis", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=False),
    )
    op.create_index("ix_usage_ts", "usage", ["ts"])
    op.create_index("ix_usage_tenant_ts", "usage", ["tenant", "ts"])


def downgrade() -> None:
    op.drop_index("ix_usage_tenant_ts", table_name="usage")
    op.drop_index("ix_usage_ts", table_name="usage")
    op.drop_table("usage")
