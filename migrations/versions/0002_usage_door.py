"""usage.door: the client's route of each call (chat.completions, messages, responses)

Revision ID: 0002_usage_door
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_usage_door"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("usage", sa.Column("door", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("door")
