"""Revoked and expired keys: never loaded into a gateway's keyring, listed for their retention
period, then deleted with an audit row each (the rows that told of them stay). SQLite and
PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gateway.apikeys.keyring import PRUNE_INTERVAL, PRUNE_RETRY, Keyring
from gateway.apikeys.records import KeyRecords, KeyRequest
from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from tests.gateway.apikeys.test_keyring import NOW, Clock

RETENTION = timedelta(days=90)


def test_the_keyring_holds_only_the_keys_that_may_call(engine) -> None:
    """Every key ever issued was loaded into every process, revoked and expired ones too."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock, retention=RETENTION)
    for key_id in ("live", "revoked", "expired", "expiring"):
        records.issue(KeyRequest("acme", key_id), "alice")
    records.revoke("revoked", "alice")
    records.expire("expired", NOW, "alice")
    records.expire("expiring", NOW + timedelta(hours=1), "alice")
    assert keyring.refresh()
    assert sorted(keyring.snapshot.by_id) == [("acme", "expiring"), ("acme", "live")]
    assert len(keyring.snapshot.by_sha256) == 2
    assert [k.key_id for k in records.all("acme")] == ["expired", "expiring", "live", "revoked"]


def test_keys_past_their_retention_are_pruned_and_their_audit_rows_kept(engine) -> None:
    """Revoked and expired keys stayed in `api_keys` (and the listing) for ever."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock, retention=RETENTION)
    for tenant, key_id in (("acme", "old"), ("acme", "keep"), ("globex", "old"), ("acme", "x")):
        records.issue(KeyRequest(tenant, key_id), "alice")
    records.revoke("old", "alice", tenant="acme")
    records.expire("old", NOW + timedelta(days=1), "alice", tenant="globex")
    # issued two days later, expired long ago: its retention runs from its issue
    clock.now = NOW + timedelta(days=2)
    records.issue(KeyRequest("acme", "born-expired", expires_at=NOW - timedelta(days=400)), "a")
    listed = [k.scope for k in records.all()]
    clock.now = NOW + RETENTION  # acme/old was revoked exactly the retention ago: it stays
    assert keyring.refresh()
    assert [k.scope for k in records.all()] == listed
    clock.now = NOW + RETENTION + PRUNE_INTERVAL
    assert keyring.refresh()
    assert [k.scope for k in records.all()] == [
        ("acme", "born-expired"), ("acme", "keep"), ("acme", "x"), ("globex", "old")
    ]  # fmt: skip
    clock.now = NOW + timedelta(days=1) + RETENTION + 2 * PRUNE_INTERVAL
    assert keyring.refresh()
    assert [k.scope for k in records.all()] == [("acme", "born-expired"), ("acme", "keep"),
                                                ("acme", "x")]  # fmt: skip
    clock.now = NOW + RETENTION + timedelta(days=3)  # past its issue's retention: gone
    assert keyring.refresh()
    assert [k.scope for k in records.all()] == [("acme", "keep"), ("acme", "x")]
    audit = [(a.actor, a.action, a.target) for a in reversed(records.audit_log())]
    assert audit[-3:] == [
        ("retention", "key.prune", "acme/old"),
        ("retention", "key.prune", "globex/old"),
        ("retention", "key.prune", "acme/born-expired"),
    ]
    assert ("alice", "key.revoke", "acme/old") in audit  # what was done to it stays on record
    assert sum(1 for a in audit if a[1] == "key.issue") == 5


def test_a_prune_runs_once_an_interval(engine) -> None:
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock, retention=RETENTION)
    records.issue(KeyRequest("acme", "gone"), "alice")
    records.revoke("gone", "alice")
    clock.now = NOW + RETENTION - timedelta(minutes=1)
    assert keyring.refresh()  # pruned: nothing yet; the next prune is an interval away
    clock.now = NOW + RETENTION + timedelta(minutes=1)
    assert keyring.refresh() and [k.key_id for k in records.all()] == ["gone"]
    clock.now = NOW + RETENTION - timedelta(minutes=1) + PRUNE_INTERVAL
    assert keyring.refresh() and records.all() == []


def test_a_prune_the_database_refuses_is_tried_again_soon(engine) -> None:
    """A process that starts before the ledger is migrated: its first prune found no table, and
    the next one waited a whole interval."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock, retention=RETENTION)
    records.issue(KeyRequest("acme", "gone"), "alice")
    records.revoke("gone", "alice")
    clock.now = NOW + RETENTION + timedelta(seconds=1)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE api_keys RENAME TO api_keys_away"))
    assert not keyring.refresh()
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE api_keys_away RENAME TO api_keys"))
    clock.now += PRUNE_RETRY
    assert keyring.refresh() and records.all() == []


@pytest.mark.postgres
def test_processes_pruning_at_once_delete_and_audit_each_key_once(postgres_url: str) -> None:
    """Every process prunes: two at the same instant must not audit a key twice, nor fail."""
    migrate(postgres_url)
    engines = [create_ledger_engine(postgres_url) for _ in range(2)]
    clock = Clock()
    records = [KeyRecords(session_factory(e), clock) for e in engines]
    for n in range(60):
        records[0].issue(KeyRequest("acme", f"k{n:02d}"), "alice")
        records[0].revoke(f"k{n:02d}", "alice")
    clock.now = NOW + RETENTION + timedelta(seconds=1)
    with ThreadPoolExecutor(2) as pool:
        pruned = list(pool.map(lambda r: r.prune(RETENTION), records))
    assert sum(pruned) == 60 and records[0].all() == []
    audit = records[1].audit_log(limit=500)
    assert sorted(a.target for a in audit if a.action == "key.prune") == [
        f"acme/k{n:02d}" for n in range(60)
    ]
    for engine in engines:
        engine.dispose()
