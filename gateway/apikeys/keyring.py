"""Every gateway process's view of the issued keys: a snapshot of `api_keys` (and of each
budgeted key's spend in its window) refreshed from the database every `poll_interval_s`, so an
issue, expiry or revocation made on any process takes effect on all of them within two polls.
A poll reads the keys again only when the admin audit log moved (every change adds a row) and
every `FULL_RELOAD_POLLS` polls; otherwise one small query, and the budgeted keys' spend. Only
the keys that may call are read: a revoked or expired one is refused whether held or not. Every
`PRUNE_INTERVAL` the poll also deletes the keys past their retention (`KeyRecords.prune`).

`KeyChain` answers `tenant_for_key` from the tenant policies' YAML keys first, then from this
snapshot, narrowing the tenant's policy to the key's model subset. A key is named by (tenant,
id) in the ledger, the quotas and the sessions, so an issued key whose id the tenant's policy
file also holds (a YAML edit after the issue) is refused: the file's key wins.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gateway.apikeys.records import PRUNE_BATCH, IssuedKey, KeyRecords
from gateway.errors import KeyBudgetExhausted
from gateway.ledger.daily import spend_since
from gateway.ledger.models import to_money
from policies.model import TenantPolicy

log = logging.getLogger("lantern.apikeys")
DEFAULT_POLL_INTERVAL_S = 1.0
FULL_RELOAD_POLLS = 60  # keys re-read even with no audited change (a restore, a manual edit)
DEFAULT_RETENTION = timedelta(days=90)
PRUNE_INTERVAL = timedelta(hours=1)  # per process: a prune that finds nothing is one query
MAX_PRUNED_PER_POLL = 20 * PRUNE_BATCH  # the rest waits for the next interval
PRUNE_RETRY = timedelta(minutes=1)  # after a prune the database refused (not migrated yet)


def window_start(window: str, now: datetime) -> datetime:
    """The start (UTC) of the day, ISO week (Monday) or month that holds `now`."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "day":
        return day
    if window == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


@dataclass(frozen=True, slots=True)
class KeyringSnapshot:
    by_sha256: dict[str, IssuedKey] = field(default_factory=dict)
    # (tenant, key id) of each budgeted key -> its spend in its window
    spend_usd: dict[tuple[str, str], Decimal] = field(default_factory=dict)
    # the same keys by (tenant, key id), the table's primary key: the checks of keys that hold
    # something open (keep-warm reads, MCP sessions and streams) look each up in one step
    by_id: dict[tuple[str, str], IssuedKey] = field(default_factory=dict)


class Keyring:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        clock: Callable[[], datetime],
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        retention: timedelta = DEFAULT_RETENTION,
    ) -> None:
        self._records = KeyRecords(sessions, clock)
        self._retention = retention
        self._next_prune_at: datetime | None = None
        self._sessions = sessions
        self._clock = clock
        self._poll_interval_s = poll_interval_s
        self._snapshot = KeyringSnapshot()
        self._mark: tuple[int, int | None] | None = None  # the audit log's when keys were read
        self._polls_since_read = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def snapshot(self) -> KeyringSnapshot:
        return self._snapshot

    def refresh(self) -> bool:
        """Reload the snapshot; False (the old one kept) while the database cannot answer. The
        keys are read again only when the audit log moved since the last read (or every
        `FULL_RELOAD_POLLS` calls): with thousands of keys a poll stays one small query."""
        self._prune()
        try:
            mark = self._records.change_mark()
            if mark != self._mark or self._polls_since_read >= FULL_RELOAD_POLLS:
                by_sha256 = {k.sha256: k for k in self._records.live()}
                by_id = {(k.tenant, k.key_id): k for k in by_sha256.values()}
                self._polls_since_read = 0
            else:
                by_sha256, by_id = self._snapshot.by_sha256, self._snapshot.by_id
                self._polls_since_read += 1
            spend = self._spend([k for k in by_sha256.values() if k.budget_usd is not None])
        except SQLAlchemyError as error:
            log.debug("api key refresh failed: %s", type(error).__name__)
            return False
        self._snapshot, self._mark = KeyringSnapshot(by_sha256, spend, by_id), mark
        return True

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lantern-keyring", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_interval_s):
            self.refresh()

    def _prune(self) -> None:
        """Delete the keys past their retention, once a PRUNE_INTERVAL, a batch at a time (the
        audit rows make every process read the keys again, once). A prune the database refuses
        (a process starts before the ledger is migrated) is tried again after PRUNE_RETRY; the
        keys are read all the same."""
        now = self._clock()
        if self._next_prune_at is not None and now < self._next_prune_at:
            return
        pruned, batch = 0, PRUNE_BATCH
        try:
            while batch == PRUNE_BATCH and pruned < MAX_PRUNED_PER_POLL:
                batch = self._records.prune(self._retention)
                pruned += batch
        except SQLAlchemyError as error:
            log.debug("pruning api keys failed: %s", type(error).__name__)
            self._next_prune_at = now + PRUNE_RETRY
            return
        self._next_prune_at = now + PRUNE_INTERVAL
        if pruned:
            log.info("pruned %d api keys past their %d-day retention", pruned, self._retention.days)

    def _spend(self, budgeted: list[IssuedKey]) -> dict[tuple[str, str], Decimal]:
        """Each budgeted key's spend since its window's start, from the daily rollup (a window
        starts at a UTC midnight, so its days are whole): one query per window start."""
        if not budgeted:
            return {}
        now = self._clock()
        by_start: dict[date, list[tuple[str, str]]] = {}
        for key in budgeted:
            start = window_start(key.budget_window or "month", now).date()
            by_start.setdefault(start, []).append(key.scope)
        spend = {key.scope: Decimal(0) for key in budgeted}
        with self._sessions() as session:
            for start, scopes in by_start.items():
                for scope, spent in spend_since(session, scopes, start).items():
                    spend[scope] = to_money(spent)
        return spend


class PolicyKeys(Protocol):
    """What KeyChain needs of the policy store."""

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None: ...

    def get(self, tenant: str) -> TenantPolicy | None: ...


class KeyChain:
    """Policy YAML keys first, then issued keys; implements gateway.http.auth.KeyLookup."""

    def __init__(
        self, policies: PolicyKeys, keyring: Keyring, clock: Callable[[], datetime]
    ) -> None:
        self._policies = policies
        self._keyring = keyring
        self._clock = clock

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        found = self._policies.tenant_for_key(key)
        if found is not None:
            return found
        snapshot = self._keyring.snapshot
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        issued = snapshot.by_sha256.get(digest)
        if issued is None or not hmac.compare_digest(issued.sha256, digest):
            return None
        if not issued.is_usable(self._clock()):
            return None
        policy = self._policies.get(issued.tenant)
        if policy is None or _in_policy(policy, issued.key_id):
            return None  # its id is the policy file's key's now: the two must not share it
        _check_budget(issued, snapshot.spend_usd.get(issued.scope, Decimal(0)))
        return _narrowed(policy, issued), issued.key_id

    def policy_for_key_id(self, tenant: str, key_id: str) -> TenantPolicy | None:
        """The policy a call of `tenant` with its key `key_id` would run under now (for what
        the gateway does on a client's behalf: keep-warm reads, its MCP sessions and streams),
        or None when that key may no longer call: gone from the policy file, revoked, expired or
        over its budget."""
        policy = self._policies.get(tenant)
        if policy is None:
            return None
        if _in_policy(policy, key_id):
            return policy
        snapshot = self._keyring.snapshot
        issued = snapshot.by_id.get((tenant, key_id))
        if issued is None or not issued.is_usable(self._clock()):
            return None
        try:
            _check_budget(issued, snapshot.spend_usd.get(issued.scope, Decimal(0)))
        except KeyBudgetExhausted:
            return None
        return _narrowed(policy, issued)


def _in_policy(policy: TenantPolicy, key_id: str) -> bool:
    return any(k.id == key_id for k in policy.api_keys)


def _check_budget(issued: IssuedKey, spent: Decimal) -> None:
    if issued.budget_usd is not None and spent >= issued.budget_usd:
        raise KeyBudgetExhausted(
            f"key {issued.key_id} spent ${spent} of its ${issued.budget_usd} "
            f"{issued.budget_window} budget"
        )


def _narrowed(policy: TenantPolicy, issued: IssuedKey) -> TenantPolicy:
    """The tenant's policy with `models` cut to the key's subset (within what the tenant may)."""
    if issued.models is None:
        return policy
    allowed = [m for m in issued.models if not policy.models or m in policy.models]
    # an empty subset after narrowing must not widen to "every model": keep a name none has
    return policy.model_copy(update={"models": tuple(allowed) or ("(none)",)})
