"""A migrated ledger database on SQLite and on PostgreSQL, for the issued keys' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.engine import Engine

from gateway.ledger.db import create_ledger_engine, migrate


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path}/ledger.db"
    )
    migrate(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()
