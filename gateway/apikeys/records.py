"""The `api_keys` table: issue, list, expire, revoke and prune keys, each change audited (who,
what, when: audit.py) in the same transaction. Sync database I/O: async callers use a
thread. A revoked or expired key is kept for its retention period, then deleted (`prune`); the
audit rows that tell of it stay.

A key is named by (tenant, id), as the ledger's rows are: two tenants may hold the same id.
The secret is returned once by `issue` and never stored: only its sha256 is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from gateway.apikeys.audit import AuditEntry, audit_row, change_mark, read_audit_log
from gateway.keys import new_key
from gateway.ledger.models import ApiKeyRecord, to_money

BudgetWindow = Literal["day", "week", "month"]
BUDGET_WINDOWS: tuple[str, ...] = ("day", "week", "month")
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TENANT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
MAX_MODELS_CHARS = 4096  # `api_keys.models`' width: the JSON list of a key's models
PRUNE_BATCH = 500  # keys one `prune` deletes at most (one transaction)
PRUNE_ACTOR = "retention"
DEFAULT_MAX_LIVE_PER_TENANT = 1000


class KeyRequestInvalid(ValueError):
    """A key request names something that cannot be (unknown tenant, bad id, bad budget);
    `field`: the field (or query parameter) at fault, where one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class KeyIdConflict(KeyRequestInvalid):
    """A key id the tenant already holds, or one several tenants hold named without a tenant."""


class KeyLimitReached(KeyRequestInvalid):
    """The tenant holds as many live keys (neither revoked nor expired) as it may."""


class KeyNotFound(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A stored key as the gateway uses it (never the secret)."""

    key_id: str
    tenant: str
    sha256: str
    models: tuple[str, ...] | None  # None: every model the tenant's policy allows
    budget_usd: Decimal | None
    budget_window: str | None
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    created_by: str

    @property
    def scope(self) -> tuple[str, str]:
        """(tenant, key id): what names the key, in `api_keys` and in the ledger."""
        return self.tenant, self.key_id

    def is_usable(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """What an admin asks for; validated by `KeyRecords.issue`."""

    tenant: str
    key_id: str | None = None
    models: tuple[str, ...] | None = None
    budget_usd: Decimal | None = None
    budget_window: str | None = None
    expires_at: datetime | None = None


class KeyRecords:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        clock: Callable[[], datetime],
        max_live_per_tenant: int = DEFAULT_MAX_LIVE_PER_TENANT,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._max_live = max_live_per_tenant

    def issue(self, request: KeyRequest, actor: str) -> tuple[IssuedKey, str]:
        """(the stored key, its secret: shown to the caller once); KeyLimitReached when the
        tenant holds its `max_live_per_tenant` live keys already."""
        _check(request)
        fresh = new_key(request.key_id)
        now = self._clock()
        record = ApiKeyRecord(
            id=fresh.key_id,
            tenant=request.tenant,
            sha256=fresh.sha256,
            models=_models_json(request.models) if request.models is not None else None,
            budget_usd=request.budget_usd,
            budget_window=request.budget_window,
            expires_at=request.expires_at,
            revoked_at=None,
            created_at=now,
            created_by=actor,
        )
        detail = {"models": request.models, "budget_usd": str(request.budget_usd or "")}
        try:
            with self._sessions.begin() as session:
                session.add(record)
                target = f"{request.tenant}/{fresh.key_id}"
                session.add(audit_row(now, actor, "key.issue", target, detail))
                session.flush()
                self._check_live(session, request.tenant, now)
        except IntegrityError as error:
            raise KeyIdConflict(
                f"key id {fresh.key_id!r} is already taken in tenant {request.tenant!r}", "id"
            ) from error
        return _issued(record), fresh.key

    def all(self, tenant: str | None = None) -> list[IssuedKey]:
        check_tenant(tenant)
        query = sa.select(ApiKeyRecord).order_by(ApiKeyRecord.tenant, ApiKeyRecord.id)
        if tenant is not None:
            query = query.where(ApiKeyRecord.tenant == tenant)
        with self._sessions() as session:
            return [_issued(r) for r in session.scalars(query)]

    def live(self) -> list[IssuedKey]:
        """The keys that may call now (neither revoked nor expired): what a gateway loads. Those
        that may not are refused alike whether loaded or not, so none of them is held."""
        query = sa.select(ApiKeyRecord).where(_live_at(self._clock()))
        with self._sessions() as session:
            return [_issued(r) for r in session.scalars(query)]

    def num_kept(self) -> dict[str, int]:
        """Per tenant, the keys that may not call (revoked or expired) kept until pruned: a
        count, not the keys (a tenant may hold many)."""
        k = ApiKeyRecord
        query = sa.select(k.tenant, sa.func.count()).where(~_live_at(self._clock()))
        with self._sessions() as session:
            rows = session.execute(query.group_by(k.tenant)).all()
        return {tenant: int(count) for tenant, count in rows}

    def prune(self, retention: timedelta) -> int:
        """Delete up to PRUNE_BATCH keys revoked, or expired and issued, more than `retention`
        ago, each with a `key.prune` audit row; how many. Processes that prune at once delete
        and audit each key once (the delete of a key gone already removes nothing)."""
        now = self._clock()
        cutoff = now - retention
        k = ApiKeyRecord
        past = sa.or_(k.revoked_at < cutoff, sa.and_(k.expires_at < cutoff, k.created_at < cutoff))
        query = sa.select(k.tenant, k.id).where(past).order_by(k.tenant, k.id).limit(PRUNE_BATCH)
        pruned = 0
        with self._sessions.begin() as session:
            for tenant, key_id in session.execute(query).all():
                one = sa.delete(k).where(k.tenant == tenant, k.id == key_id, past).returning(k.id)
                if session.execute(one).first() is not None:
                    detail = {"retention_days": retention.days}
                    target = f"{tenant}/{key_id}"
                    session.add(audit_row(now, PRUNE_ACTOR, "key.prune", target, detail))
                    pruned += 1
        return pruned

    def page(
        self, tenant: str | None, after: tuple[str, str] | None, limit: int
    ) -> tuple[list[IssuedKey], bool]:
        """At most `limit` keys in (tenant, id) order, those past `after` only, and whether more
        follow: what a listing sends, however many keys the table holds."""
        check_tenant(tenant)
        k = ApiKeyRecord
        query = sa.select(k).order_by(k.tenant, k.id).limit(limit + 1)
        if tenant is not None:
            query = query.where(k.tenant == tenant)
        if after is not None:
            query = query.where(sa.tuple_(k.tenant, k.id) > sa.tuple_(*after))
        with self._sessions() as session:
            found = [_issued(r) for r in session.scalars(query)]
        return found[:limit], len(found) > limit

    def change_mark(self) -> tuple[int, int | None]:
        """(audit rows, the highest audit id): moves whenever `api_keys` may have (audit.py)."""
        return change_mark(self._sessions.kw["bind"])

    def expire(
        self, key_id: str, at: datetime | None, actor: str, tenant: str | None = None
    ) -> IssuedKey:
        """`tenant` None: the one key with this id (KeyIdConflict when tenants share it)."""
        when = _expiry(at) if at is not None else self._clock()
        values: dict[str, object] = {"expires_at": when}
        return self._change(tenant, key_id, actor, "key.expire", values, when.isoformat())

    def revoke(self, key_id: str, actor: str, tenant: str | None = None) -> IssuedKey:
        """Revoking a revoked key changes nothing: it keeps when it was first revoked."""
        now = self._clock()
        return self._change(tenant, key_id, actor, "key.revoke", {"revoked_at": now}, "", True)

    def audit_log(self, limit: int = 100) -> list[AuditEntry]:
        return read_audit_log(self._sessions, limit)

    def _change(
        self,
        tenant: str | None,
        key_id: str,
        actor: str,
        action: str,
        values: dict[str, object],
        note: str,
        once: bool = False,  # True: a key that has every value set already is left as it is
    ) -> IssuedKey:
        if not KEY_ID.fullmatch(key_id) or (tenant is not None and not TENANT_ID.fullmatch(tenant)):
            raise KeyNotFound(f"no key {key_id[:80]!r}")  # never sent to the database as is
        query = sa.select(ApiKeyRecord).where(ApiKeyRecord.id == key_id)
        if tenant is not None:
            query = query.where(ApiKeyRecord.tenant == tenant)
        with self._sessions.begin() as session:
            found = list(session.scalars(query.limit(2)))
            if not found:
                raise KeyNotFound(
                    f"no key {key_id!r}" + (f" in tenant {tenant!r}" if tenant else "")
                )
            if len(found) > 1:
                raise KeyIdConflict(
                    f"key id {key_id!r} is held by several tenants: name the tenant (?tenant=)",
                    "tenant",
                )
            record = found[0]
            if once and all(getattr(record, name) is not None for name in values):
                return _issued(record)
            now = self._clock()
            was_live = _issued(record).is_usable(now)
            for name, value in values.items():
                setattr(record, name, value)
            target = f"{record.tenant}/{key_id}"
            session.add(audit_row(now, actor, action, target, {"at": note}))
            session.flush()
            if not was_live and _issued(record).is_usable(now):  # an expiry moved ahead
                self._check_live(session, record.tenant, now)
            return _issued(record)

    def _check_live(self, session: Session, tenant: str, now: datetime) -> None:
        """KeyLimitReached (the transaction rolls back) once the change just flushed left the
        tenant more than its live keys. Issues that commit at the same instant on several
        processes may each pass: the bound is overrun by at most those in flight."""
        live = sa.select(sa.func.count()).where(ApiKeyRecord.tenant == tenant, _live_at(now))
        if (session.scalar(live) or 0) > self._max_live:
            raise KeyLimitReached(
                f"tenant {tenant!r} holds {self._max_live} live keys, its most "
                "(api_keys.max_live_per_tenant): revoke or expire one first",
                "tenant",
            )


def _live_at(now: datetime) -> sa.ColumnElement[bool]:
    """The keys that may call at `now`: neither revoked nor expired."""
    k = ApiKeyRecord
    return sa.and_(k.revoked_at.is_(None), sa.or_(k.expires_at.is_(None), k.expires_at > now))


def check_tenant(tenant: str | None) -> str | None:
    """`tenant`, if None or a tenant id; KeyRequestInvalid naming it otherwise."""
    if tenant is not None and not TENANT_ID.fullmatch(tenant):
        raise KeyRequestInvalid(
            f"tenant {tenant[:80]!r}: tenant ids are 1-63 lowercase letters, digits, '_' or '-'",
            "tenant",
        )
    return tenant


def _check(request: KeyRequest) -> None:
    if request.key_id is not None and not KEY_ID.fullmatch(request.key_id):
        raise KeyRequestInvalid(
            f"key id {request.key_id[:80]!r}: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            "id",
        )
    if request.models is not None and len(_models_json(request.models)) > MAX_MODELS_CHARS:
        raise KeyRequestInvalid(
            f"models: at most {MAX_MODELS_CHARS} characters as a JSON list "
            f"(got {len(request.models)} names); leave it out for all the tenant's models",
            "models",
        )
    if (request.budget_usd is None) != (request.budget_window is None):
        raise KeyRequestInvalid("budget_usd and budget_window go together", "budget_window")
    if request.budget_window is not None and request.budget_window not in BUDGET_WINDOWS:
        raise KeyRequestInvalid(
            f"budget_window {request.budget_window[:40]!r}: use {'|'.join(BUDGET_WINDOWS)}",
            "budget_window",
        )
    if request.budget_usd is not None:
        try:
            to_money(request.budget_usd)
        except ValueError as error:
            raise KeyRequestInvalid(f"budget_usd: {error}", "budget_usd") from error
    if request.expires_at is not None:
        _expiry(request.expires_at)


def _expiry(at: datetime) -> datetime:
    """`at` in UTC, as `api_keys` stores it; KeyRequestInvalid when it has no offset, or one
    that moves it out of the years 1 to 9999 (it would fail in the database, as a 503)."""
    if at.tzinfo is None:
        raise KeyRequestInvalid(
            "expires_at needs a UTC offset (e.g. 2026-12-31T00:00:00Z)", "expires_at"
        )
    try:
        return at.astimezone(UTC)
    except OverflowError as error:
        raise KeyRequestInvalid(
            f"expires_at {at.isoformat()}: not in the years 1 to 9999 in UTC", "expires_at"
        ) from error


def _models_json(models: Sequence[str]) -> str:
    return json.dumps(list(models))


def _issued(record: ApiKeyRecord) -> IssuedKey:
    models: Sequence[str] | None = json.loads(record.models) if record.models else None
    return IssuedKey(
        key_id=record.id,
        tenant=record.tenant,
        sha256=record.sha256,
        models=tuple(models) if models is not None else None,
        budget_usd=to_money(record.budget_usd) if record.budget_usd is not None else None,
        budget_window=record.budget_window,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
        created_at=record.created_at,
        created_by=record.created_by,
    )
