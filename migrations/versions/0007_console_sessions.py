"""console_sessions: console logins kept server-side, so logout, a rotated admin token and the
expiry close them on every gateway process sharing the ledger database

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("cookie_sha256", sa.String(64), primary_key=True),
        sa.Column("admin_hmac", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_console_sessions_created_at", "console_sessions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_created_at", table_name="console_sessions")
    op.drop_table("console_sessions")
