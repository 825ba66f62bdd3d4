"""Issued keys on SQLite and PostgreSQL: records and audit, the keyring's refresh, and
KeyChain's lookup (expiry, revocation, model subset, budget windows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from gateway.apikeys.keyring import FULL_RELOAD_POLLS, KeyChain, Keyring, window_start
from gateway.apikeys.records import (
    KeyIdConflict,
    KeyNotFound,
    KeyRecords,
    KeyRequest,
    KeyRequestInvalid,
)
from gateway.errors import KeyBudgetExhausted
from gateway.ledger.db import session_factory
from gateway.ledger.models import ApiKeyRecord, UsageRow
from gateway.ledger.usage_insert import insert_rows
from policies.model import ApiKeyEntry, TenantPolicy

NOW = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)  # a Thursday


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


class Policies:
    def __init__(self) -> None:
        self.acme = TenantPolicy(tenant="acme", models=("gpt-4o-mini", "smollm2"))
        self.globex = TenantPolicy(tenant="globex", models=("smollm2",))

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        return (self.acme, "yaml") if key == "lt-yaml" else None

    def get(self, tenant: str) -> TenantPolicy | None:
        return {"acme": self.acme, "globex": self.globex}.get(tenant)


def spend(key_id: str, ts: datetime, cost: str, n: int, tenant: str = "acme") -> UsageRow:
    return UsageRow(
        id=f"row-{n}", ts=ts, tenant=tenant, key_id=key_id, model="smollm2",
        request_id=f"r{n}", status="ok", cost_usd=cost,
    )  # fmt: skip


def test_window_starts() -> None:
    assert window_start("day", NOW) == datetime(2026, 12, 3, tzinfo=UTC)
    assert window_start("week", NOW) == datetime(2026, 11, 30, tzinfo=UTC)  # Monday
    assert window_start("month", NOW) == datetime(2026, 12, 1, tzinfo=UTC)


def test_issue_expire_revoke_with_audit_and_lookup(engine) -> None:
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    chain = KeyChain(Policies(), keyring, clock)
    key, secret = records.issue(KeyRequest("acme", "bot", models=("smollm2", "llama")), "alice")
    assert chain.tenant_for_key(secret) is None  # not refreshed yet
    assert keyring.refresh()
    found = chain.tenant_for_key(secret)
    assert found is not None and found[1] == "bot"
    assert found[0].models == ("smollm2",)  # narrowed within what the tenant may call
    assert chain.tenant_for_key("lt-yaml") == (Policies().acme, "yaml")

    records.expire("bot", NOW + timedelta(hours=1), "alice")
    keyring.refresh()
    assert chain.tenant_for_key(secret) is not None
    clock.now = NOW + timedelta(hours=1)
    assert chain.tenant_for_key(secret) is None  # expired
    records.revoke("bot", "bob")
    assert [(a.actor, a.action, a.target) for a in records.audit_log()] == [
        ("bob", "key.revoke", "acme/bot"),
        ("alice", "key.expire", "acme/bot"),
        ("alice", "key.issue", "acme/bot"),
    ]
    assert records.all("acme")[0].revoked_at == NOW + timedelta(hours=1)
    clock.now = NOW + timedelta(hours=2)
    records.revoke("bot", "carol")  # revoked already: when it was revoked stands
    assert records.all("acme")[0].revoked_at == NOW + timedelta(hours=1)
    assert len(records.audit_log()) == 3
    with pytest.raises(KeyIdConflict, match="already taken in tenant 'acme'"):
        records.issue(KeyRequest("acme", "bot"), "alice")


def test_a_weekly_budget_counts_only_this_weeks_spend(engine) -> None:
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    chain = KeyChain(Policies(), keyring, clock)
    _, secret = records.issue(KeyRequest("acme", "wk", None, Decimal("1.00"), "week"), "alice")
    insert_rows(engine, [
        spend("wk", datetime(2026, 11, 29, tzinfo=UTC), "5.00", 1),  # last week: not counted
        spend("wk", datetime(2026, 12, 1, tzinfo=UTC), "0.60", 2),
    ])  # fmt: skip
    # a daily budget beside it: windows starting on other days are read in the same refresh
    records.issue(KeyRequest("acme", "dy", None, Decimal("9"), "day"), "alice")
    insert_rows(engine, [
        spend("dy", datetime(2026, 12, 2, 23, 59, tzinfo=UTC), "4.00", 4),  # yesterday
        spend("dy", datetime(2026, 12, 3, 0, 0, tzinfo=UTC), "0.25", 5),
        spend("dy", datetime(2026, 12, 3, 13, 59, tzinfo=UTC), "0.00000001", 6),
    ])  # fmt: skip
    keyring.refresh()
    assert keyring.snapshot.spend_usd["acme", "wk"] == Decimal("0.60000000")
    assert keyring.snapshot.spend_usd["acme", "dy"] == Decimal("0.25000001")
    assert chain.tenant_for_key(secret) is not None
    insert_rows(engine, [spend("wk", datetime(2026, 12, 2, tzinfo=UTC), "0.40", 3)])
    keyring.refresh()
    with pytest.raises(KeyBudgetExhausted, match=r"spent \$1.00000000 of its \$1.00000000 week"):
        chain.tenant_for_key(secret)


def test_bad_requests_say_what_is_accepted(engine) -> None:
    records = KeyRecords(session_factory(engine), Clock())
    with pytest.raises(KeyRequestInvalid, match="day|week|month"):
        records.issue(KeyRequest("acme", None, None, Decimal(1), "year"), "a")
    with pytest.raises(KeyRequestInvalid, match="go together"):
        records.issue(KeyRequest("acme", None, None, Decimal(1), None), "a")
    with pytest.raises(KeyRequestInvalid, match="letters, digits"):
        records.issue(KeyRequest("acme", "no spaces"), "a")


def test_policy_for_key_id_is_none_once_the_key_may_no_longer_call(engine) -> None:
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    policies = Policies()
    yaml_key = ApiKeyEntry(id="yaml", sha256="0" * 64)
    policies.acme = policies.acme.model_copy(update={"api_keys": (yaml_key,)})
    chain = KeyChain(policies, keyring, clock)
    records.issue(KeyRequest("acme", "bot", models=("smollm2",)), "alice")
    records.issue(KeyRequest("acme", "cap", None, Decimal("1.00"), "day"), "alice")
    keyring.refresh()
    assert chain.policy_for_key_id("acme", "yaml") == policies.acme
    bot = chain.policy_for_key_id("acme", "bot")
    assert bot is not None and bot.models == ("smollm2",)  # narrowed as at lookup
    assert chain.policy_for_key_id("globex", "bot") is None  # another tenant's id
    assert chain.policy_for_key_id("acme", "nobody") is None
    assert chain.policy_for_key_id("acme", "cap") is not None
    keyring.refresh()  # nothing changed: the keys are not read again, and still found
    assert chain.policy_for_key_id("acme", "bot") is not None
    insert_rows(engine, [spend("cap", datetime(2026, 12, 3, 1, 0, tzinfo=UTC), "1.00", 1)])
    records.revoke("bot", "bob")
    keyring.refresh()
    assert chain.policy_for_key_id("acme", "bot") is None  # revoked
    assert chain.policy_for_key_id("acme", "cap") is None  # over its budget


def test_a_key_id_names_a_key_within_its_tenant_only(engine) -> None:
    """globex's key `prod` is not charged acme's `prod` spend; each tenant may hold a `bot`;
    a revocation that names no tenant is refused while both do."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    chain = KeyChain(Policies(), keyring, clock)
    insert_rows(engine, [spend("prod", datetime(2026, 12, 3, 9, 0, tzinfo=UTC), "0.148", 1)])
    _, secret = records.issue(KeyRequest("globex", "prod", None, Decimal("0.10"), "day"), "a")
    records.issue(KeyRequest("acme", "prod", None, Decimal("0.10"), "day"), "a")
    keyring.refresh()
    assert keyring.snapshot.spend_usd == {
        ("globex", "prod"): Decimal("0"),
        ("acme", "prod"): Decimal("0.14800000"),
    }
    found = chain.tenant_for_key(secret)
    assert found is not None and (found[0].tenant, found[1]) == ("globex", "prod")
    assert chain.policy_for_key_id("acme", "prod") is None  # acme's own is spent

    with pytest.raises(KeyIdConflict, match="several tenants"):
        records.revoke("prod", "bob")
    assert records.revoke("prod", "bob", tenant="globex").tenant == "globex"
    assert [k.revoked_at is None for k in records.all()] == [True, False]  # acme, globex
    with pytest.raises(KeyNotFound, match="in tenant 'initech'"):
        records.expire("prod", None, "bob", tenant="initech")


def test_a_poll_reads_the_keys_again_only_when_the_audit_log_moved(engine) -> None:
    """Another process's revocation is seen at the next poll; a poll with nothing audited
    reads no key; a change made past the audit log (a restore) is seen within
    FULL_RELOAD_POLLS polls; budgeted keys' spend is read on every poll."""
    clock = Clock()
    records, other_process = (KeyRecords(session_factory(engine), clock) for _ in range(2))
    keyring = Keyring(session_factory(engine), clock)
    chain = KeyChain(Policies(), keyring, clock)
    _, secret = records.issue(KeyRequest("acme", "bot"), "alice")
    _, budgeted = records.issue(
        KeyRequest("acme", "capped", budget_usd=Decimal("1.00"), budget_window="day"), "alice"
    )
    assert keyring.refresh() and chain.tenant_for_key(secret) is not None
    reads: list[str] = []

    def note(conn, cursor, statement: str, *args: object) -> None:  # type: ignore[no-untyped-def]
        if "FROM api_keys" in statement:
            reads.append(statement)

    sa.event.listen(engine, "before_cursor_execute", note)

    def polled() -> int:
        """Keys read by one refresh (it must succeed)."""
        before = len(reads)
        assert keyring.refresh()
        return len(reads) - before

    assert polled() == 0  # nothing audited since: no key read
    insert_rows(engine, [spend("capped", NOW, "0.60", 1)])
    assert polled() == 0
    assert keyring.snapshot.spend_usd[("acme", "capped")] == Decimal("0.60")  # spend still read
    other_process.revoke("bot", "bob")
    assert polled() == 1
    assert chain.tenant_for_key(secret) is None  # revoked on the other process
    with engine.begin() as conn:  # a change no audit row tells of
        conn.execute(sa.update(ApiKeyRecord).values(revoked_at=NOW))
    polls = [polled() for _ in range(FULL_RELOAD_POLLS)]
    assert chain.tenant_for_key(budgeted) is not None and polls == [0] * FULL_RELOAD_POLLS
    assert polled() == 1
    assert chain.tenant_for_key(budgeted) is None


def test_a_poll_reads_the_audit_log_on_a_pooled_cursor_and_survives_a_failure(engine) -> None:
    """Polls read the audit log on a DBAPI cursor (no ORM session, no SQLAlchemy statement: ~1 ms
    of CPU a second less), give the connection back every time (held, it made the pool open
    another, which recreates a SQLite file deleted under the gateway), and a poll the database
    fails keeps the snapshot; the next one reads again."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    chain = KeyChain(Policies(), keyring, clock)
    _, secret = records.issue(KeyRequest("acme", "bot"), "alice")
    assert keyring.refresh()  # reads the keys
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    pool = engine.pool
    assert all(keyring.refresh() for _ in range(5))
    assert statements == []  # the audit log read below SQLAlchemy's statements
    assert pool.checkedout() == 0  # and its connection given back
    with engine.begin() as conn:  # the database refuses the read
        conn.execute(sa.text("ALTER TABLE admin_audit RENAME TO admin_audit_away"))
    assert not keyring.refresh()
    assert chain.tenant_for_key(secret) is not None  # the snapshot before it, kept
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE admin_audit_away RENAME TO admin_audit"))
    records.revoke("bot", "bob")
    assert keyring.refresh()
    assert chain.tenant_for_key(secret) is None
    assert pool.checkedout() == 0


def test_a_poll_with_the_database_unreachable_fails_without_raising(tmp_path) -> None:
    """The first connection fails (the driver's own error from the pool): the poll says so and
    the process goes on serving, as with any other database error."""
    engine = sa.create_engine(f"sqlite:///{tmp_path}/no-such-dir/ledger.db")
    keyring = Keyring(session_factory(engine), Clock())
    assert keyring.refresh() is False
    assert keyring.snapshot.by_sha256 == {}
    engine.dispose()


def test_pages_of_keys_follow_the_listing_in_order(engine) -> None:
    records = KeyRecords(session_factory(engine), Clock())
    for tenant, key_id in [("globex", "b"), ("acme", "z"), ("acme", "a-1"), ("acme", "a_1"),
                           ("globex", "a"), ("acme", "A.2")]:  # fmt: skip
        records.issue(KeyRequest(tenant, key_id), "test")
    listed = [k.scope for k in records.all()]
    paged: list[tuple[str, str]] = []
    after = None
    for _ in range(len(listed)):
        keys, more = records.page(None, after, 2)
        paged += [k.scope for k in keys]
        if not more:
            break
        after = keys[-1].scope
    assert paged == listed and len(listed) == 6
    acme, more = records.page("acme", None, 10)
    assert ([k.scope for k in acme], more) == ([s for s in listed if s[0] == "acme"], False)
