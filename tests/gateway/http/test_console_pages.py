"""The console's pages as data (gateway/http/console/pages.py) over the real ledger database,
SQLite and PostgreSQL: what each shows, and what it must not load to show it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import Engine

from gateway.apikeys.records import IssuedKey, KeyRecords, KeyRequest
from gateway.http.console.pages import ConsoleData, tenants_page
from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from gateway.settings import Settings, load_settings
from policies.store import PolicyStore
from tests.e2e.harness import write_policy
from tests.gateway.apikeys.test_keyring import NOW, Clock


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path}/ledger.db"
    )
    migrate(url)
    engine = create_ledger_engine(url)
    yield engine
    engine.dispose()


class LiveOnlyRecords(KeyRecords):
    """The key records, but loading every key ever issued is a test failure: the page must
    count the revoked and expired ones, not load them."""

    def all(self, tenant: str | None = None) -> list[IssuedKey]:
        raise AssertionError("the tenants page loaded every key ever issued")


def settings_for(tmp: Path) -> Settings:
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "console-pages",
        "models": [],
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


def test_the_tenants_page_lists_live_keys_and_counts_the_rest(
    engine: Engine, tmp_path: Path
) -> None:
    """It loaded every key ever issued, revoked and expired included, to show the live ones."""
    (tmp_path / "policies").mkdir()
    for tenant in ("acme", "globex"):
        write_policy(tmp_path / "policies", tenant, f"lt-{tenant}-console-pages-01")
    records = LiveOnlyRecords(session_factory(engine), Clock())
    for key_id in ("live-b", "live-a", "revoked", "old"):
        records.issue(KeyRequest("acme", key_id), "alice")
    records.issue(KeyRequest("acme", "expired", expires_at=NOW - timedelta(days=1)), "alice")
    records.revoke("revoked", "alice", tenant="acme")
    records.expire("old", NOW - timedelta(hours=1), "alice")
    records.issue(KeyRequest("globex", "g1"), "alice")
    policies = PolicyStore(tmp_path / "policies")
    policies.reload_now()
    data = ConsoleData(session_factory(engine), policies, records, settings_for(tmp_path))

    page = tenants_page(data, NOW)

    tenants = page.tables[0]
    assert tenants.headers[4:6] == ("keys", "revoked/expired kept")
    assert [(row[0], row[4], row[5]) for row in tenants.rows] == [
        ("acme", "k1, live-a, live-b", "3"),
        ("globex", "k1, g1", "0"),
    ]
