"""usage.kind, vcpu_seconds, gb_seconds: a row is a model call, an MCP tool call (door `mcp`)
or a sandboxed tool run, and a tool run's billed resources

`kind` is `model_call` for the rows stored before, except those of the MCP door (`tool_call`).
A tool run's row holds its vCPU-seconds and GB-seconds (NULL on other rows). No index: every
row pays for each on insert, and the budget seeding finds tool runs by their backend in the
daily rollup.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "usage", sa.Column("kind", sa.String(16), nullable=False, server_default="model_call")
    )
    op.add_column("usage", sa.Column("vcpu_seconds", sa.Float(), nullable=True))
    op.add_column("usage", sa.Column("gb_seconds", sa.Float(), nullable=True))
    op.execute("UPDATE usage SET kind = 'tool_call' WHERE door = 'mcp'")


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        for name in ("gb_seconds", "vcpu_seconds", "kind"):
            batch.drop_column(name)
