"""console: API keys issued over the admin API, the admin audit log, and the usage indexes
that spend by key, by model and by session read

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("models", sa.String(4096), nullable=True),
        sa.Column("budget_usd", sa.Numeric(18, 8), nullable=True),
        sa.Column("budget_window", sa.String(8), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    op.create_table(
        "admin_audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("ts", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("detail", sa.String(2048), nullable=False),
    )
    op.create_index("ix_admin_audit_ts", "admin_audit", ["ts"])
    op.create_index("ix_usage_key_ts", "usage", ["key_id", "ts"])
    op.create_index("ix_usage_model_ts", "usage", ["model", "ts"])
    op.create_index("ix_usage_tenant_session", "usage", ["tenant", "session_id"])


def downgrade() -> None:
    op.drop_index("ix_usage_tenant_session", table_name="usage")
    op.drop_index("ix_usage_model_ts", table_name="usage")
    op.drop_index("ix_usage_key_ts", table_name="usage")
    op.drop_index("ix_admin_audit_ts", table_name="admin_audit")
    op.drop_table("admin_audit")
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_table("api_keys")
