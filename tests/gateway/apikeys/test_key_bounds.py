"""What one tenant may hold: at most `max_live_per_tenant` live keys (neither revoked nor
expired), whoever issues them; another tenant's keys are not counted. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gateway.apikeys.records import KeyLimitReached, KeyRecords, KeyRequest
from gateway.ledger.db import session_factory
from tests.gateway.apikeys.test_keyring import NOW, Clock


def test_a_tenant_holds_at_most_its_live_keys(engine) -> None:
    """Nothing stopped one tenant's automation from issuing millions of keys, each loaded into
    every gateway process."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock, max_live_per_tenant=3)
    for key_id in ("a", "b", "c"):
        records.issue(KeyRequest("acme", key_id), "alice")
    with pytest.raises(KeyLimitReached, match=r"'acme' holds 3 live keys.*max_live_per_tenant"):
        records.issue(KeyRequest("acme", "d"), "alice")
    assert [k.key_id for k in records.all("acme")] == ["a", "b", "c"]  # nothing stored
    assert [a.target for a in records.audit_log()] == ["acme/c", "acme/b", "acme/a"]
    records.issue(KeyRequest("globex", "a"), "alice")  # the next tenant is not held back
    records.revoke("a", "alice", tenant="acme")
    records.expire("b", NOW, "alice")
    records.issue(KeyRequest("acme", "d"), "alice")
    records.issue(KeyRequest("acme", "e", expires_at=NOW - timedelta(days=1)), "alice")  # dead
    records.issue(KeyRequest("acme", "f"), "alice")
    with pytest.raises(KeyLimitReached):
        records.issue(KeyRequest("acme", "g"), "alice")


def test_moving_an_expiry_ahead_counts_the_key_again(engine) -> None:
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock, max_live_per_tenant=2)
    for key_id in ("a", "b"):
        records.issue(KeyRequest("acme", key_id), "alice")
    records.expire("a", NOW, "alice")
    records.issue(KeyRequest("acme", "c"), "alice")
    with pytest.raises(KeyLimitReached):
        records.expire("a", NOW + timedelta(days=30), "alice")
    assert records.all("acme")[0].expires_at == NOW  # the refused change left it as it was
    records.expire("b", NOW + timedelta(days=1), "alice")  # live already: not counted again
    records.revoke("c", "alice")
    assert records.expire("a", NOW + timedelta(days=30), "alice").is_usable(NOW)
