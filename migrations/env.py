"""Alembic environment for the usage ledger: runs on a connection handed in by `migrate()`, or on
the URL given as `alembic -x database_url=...` (else `sqlalchemy.url` in alembic.ini).
"""

from __future__ import annotations

from alembic import context

from gateway.ledger.db import create_ledger_engine
from gateway.ledger.models import Base

config = context.config
target_metadata = Base.metadata


def _database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("database_url")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database URL: pass -x database_url=... or set sqlalchemy.url")
    return url


def run_migrations_offline() -> None:
    context.configure(url=_database_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_ledger_engine(_database_url())
    try:
        with engine.connect() as conn:
            context.configure(connection=conn, target_metadata=target_metadata)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
