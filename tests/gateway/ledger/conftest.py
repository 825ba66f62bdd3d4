"""Ledger fixtures: migrated SQLite and PostgreSQL databases, a row factory, and a TCP proxy
that cuts a real PostgreSQL connection (an outage without stopping the shared server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import UsageRow
from tests.fakes.tcp_cut import TcpCut

T0 = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/var/ledger.db"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, sqlite_url) -> str:
    """Every ledger test that takes this runs on SQLite and on the real PostgreSQL."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return sqlite_url


@pytest.fixture
def engine(database_url) -> Iterator[Engine]:
    migrate(database_url)
    engine = create_ledger_engine(database_url)
    yield engine
    engine.dispose()


RowFactory = Callable[..., UsageRow]


@pytest.fixture
def make_row() -> RowFactory:
    counter = iter(range(1_000_000))

    def make(**fields: object) -> UsageRow:
        n = next(counter)
        values: dict[str, object] = {
            "id": f"row-{n:06d}",
            "ts": T0,
            "tenant": "acme",
            "key_id": "key-1",
            "session_id": "s-1",
            "model": "claude-sonnet",
            "backend": "anthropic",
            "request_id": f"req-{n:06d}",
            "status": "ok",
            "input_tokens": 100,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "output_tokens": 10,
            "cost_usd": Decimal("0.00045"),
            "uncached_cost_usd": Decimal("0.00045"),
            "ttft_ms": 120.0,
            "latency_ms": 900.0,
        }
        values.update(fields)
        return UsageRow(**values)  # type: ignore[arg-type]

    return make


@pytest.fixture
def count_rows() -> Callable[[Engine], int]:
    def count(engine: Engine) -> int:
        with engine.connect() as connection:
            return int(connection.execute(sa.text("SELECT count(*) FROM usage")).scalar_one())

    return count


@pytest.fixture
def pg_proxy(postgres_url) -> Iterator[tuple[TcpCut, str]]:
    """(proxy, URL of the test's PostgreSQL schema through the proxy)."""
    url = sa.make_url(postgres_url)
    proxy = TcpCut((url.host or "127.0.0.1", url.port or 5432))
    proxy.restore()
    yield proxy, url.set(port=proxy.port).render_as_string(hide_password=False)
    proxy.cut()
