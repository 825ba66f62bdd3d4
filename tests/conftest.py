"""Shared fixtures: the real Redis and PostgreSQL of this machine.

With CI=true (set by `.ci/run`) a missing service fails the test instead of skipping it,
so a green CI always means the real service was exercised.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

REDIS_URL = os.environ.get("LANTERN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "LANTERN_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _is_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _require_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if _is_ci():
        pytest.fail(message + " (CI=true: services are required)")
    pytest.skip(message)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis URL plus a unique key prefix is the test's own namespace (see `redis_prefix`)."""
    _require_service("Redis", "127.0.0.1", 6379)
    yield REDIS_URL


@pytest.fixture
def redis_prefix() -> str:
    return f"lantern-test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema per test, dropped afterwards."""
    _require_service("PostgreSQL", "127.0.0.1", 5432)
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    sep = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()
