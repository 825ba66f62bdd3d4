"""api_keys: a key is named by (tenant, id), as the ledger's rows are, so two tenants may hold
the same key id and neither is charged the other's spend

The table is rebuilt (SQLite cannot change a primary key in place); the tenant index goes, the
primary key now leads with the tenant. A downgrade fails while two tenants share an id.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = (
    "id, tenant, sha256, models, budget_usd, budget_window, expires_at, revoked_at, "
    "created_at, created_by"
)


def _columns() -> list[sa.Column[object]]:
    return [
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("models", sa.String(4096), nullable=True),
        sa.Column("budget_usd", sa.Numeric(18, 8), nullable=True),
        sa.Column("budget_window", sa.String(8), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
    ]


def _rebuild(primary_key: tuple[str, ...], names: tuple[str, str]) -> None:
    """api_keys copied into a table with `primary_key`, which then takes its name; `names`:
    its primary key's and unique hash's (PostgreSQL's index names are schema-wide, so they
    differ from the constraints of the table being copied)."""
    op.create_table(
        "api_keys_rebuilt",
        *_columns(),
        sa.PrimaryKeyConstraint(*primary_key, name=names[0]),
        sa.UniqueConstraint("sha256", name=names[1]),
    )
    op.execute(f"INSERT INTO api_keys_rebuilt ({_COLUMNS}) SELECT {_COLUMNS} FROM api_keys")
    op.drop_table("api_keys")
    op.rename_table("api_keys_rebuilt", "api_keys")


def upgrade() -> None:
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    _rebuild(("tenant", "id"), ("pk_api_keys_tenant_id", "uq_api_keys_sha256"))


def downgrade() -> None:
    _rebuild(("id",), ("api_keys_pkey", "api_keys_sha256_key"))
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
