"""The live set of tenant policies: polls `policy_dir`, keeps the last good policy per tenant.

Reads files only (stat + read, every `poll_interval_s` in one daemon thread); readers never lock:
they read one immutable state object that each reload replaces whole.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from policies.errors import DOCUMENT_FIELD, PolicyFileError, PolicyIssue
from policies.last_good import KnownNames, PolicyArchive, archived_policies, checked
from policies.loader import (
    LoadedPolicy,
    key_conflicts,
    load_policy_bytes,
    policy_files,
    read_policy_bytes,
)
from policies.model import TenantPolicy, hash_api_key

Clock = Callable[[], float]  # seconds since the epoch, comparable with file mtimes
RACY_WINDOW_S = 2.0  # a file modified this close to its last read is re-read even if stat agrees
_Outcome = LoadedPolicy | PolicyFileError


@dataclass(frozen=True, slots=True)
class TenantEntry:
    """A tenant's current (last good) policy and where it came from."""

    tenant: str
    policy: TenantPolicy
    file: str
    mtime: float
    loaded_at: float
    content_sha256: str


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    """A frozen view for `GET /admin/policy`: tenants, their sources, and current errors."""

    policy_dir: str
    version: int  # increases each time the set of policies or errors changes
    checked_at: float  # clock time of the last scan
    tenants: tuple[TenantEntry, ...]
    errors: tuple[PolicyIssue, ...]


@dataclass(frozen=True, slots=True)
class _State:
    version: int = 0
    entries: Mapping[str, TenantEntry] = field(default_factory=dict)
    loaded: Mapping[str, LoadedPolicy] = field(default_factory=dict)
    by_hash: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # sha256 → tenant, id
    errors: Mapping[str, tuple[PolicyIssue, ...]] = field(default_factory=dict)


@dataclass(slots=True)
class _Seen:
    fingerprint: tuple[int, int, int]
    read_at: float
    mtime: float
    content_sha256: str
    outcome: _Outcome


class PolicyStore:
    """Tenant policies from one directory, hot-reloaded; lookups by tenant id or API key."""

    def __init__(
        self,
        policy_dir: Path,
        *,
        clock: Clock = time.time,
        poll_interval_s: float = 0.5,
        logger: logging.Logger | None = None,
        known: KnownNames | None = None,
        archive: PolicyArchive | None = None,
    ) -> None:
        """`known`: reject policies naming models or backends the server lacks (the last good
        policy stays). `archive`: keeps each accepted file, so a restart with a broken file
        still serves the tenant's last good policy."""
        self._dir = Path(policy_dir)
        self._clock = clock
        self._poll_interval_s = poll_interval_s
        self._log = logger or logging.getLogger("lantern.policies")
        self._state = _State()
        self._seen: dict[str, _Seen] = {}
        self._checked_at = 0.0
        # the directory's (mtime_ns, inode) when it was last listed, and the clock then
        self._dir_seen: tuple[tuple[int, int], float] | None = None
        self._known = known
        self._archive = archive
        self._data: dict[str, bytes] = {}  # each valid file's bytes, for the archive
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # readers (lock-free: one reference read of an immutable state)

    def get(self, tenant: str) -> TenantPolicy | None:
        entry = self._state.entries.get(tenant)
        return entry.policy if entry is not None else None

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        """The tenant policy and key id for a presented API key, or None."""
        state = self._state
        presented = hash_api_key(key)
        match = state.by_hash.get(presented)
        if match is None:
            return None
        tenant, key_id = match
        entry = state.entries[tenant]
        stored = next(k.sha256 for k in entry.policy.api_keys if k.id == key_id)
        if not hmac.compare_digest(stored.encode(), presented.encode()):
            return None
        return entry.policy, key_id

    @property
    def version(self) -> int:
        return self._state.version

    def snapshot(self) -> PolicySnapshot:
        state = self._state
        errors = tuple(sorted(issue for issues in state.errors.values() for issue in issues))
        tenants = tuple(state.entries[t] for t in sorted(state.entries))
        return PolicySnapshot(str(self._dir), state.version, self._checked_at, tenants, errors)

    # reloading

    def start(self) -> None:
        """Load now, then poll in a daemon thread until `stop()`."""
        if self._thread is not None:
            return
        self.reload_now()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lantern-policy-poller", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> PolicyStore:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_interval_s):
            try:
                self.reload_now()
            except Exception:  # the poller must survive anything a file system does
                self._log.exception("policy reload failed")

    def reload_now(self) -> bool:
        """Scan the directory once; return True when policies or errors changed."""
        with self._reload_lock:
            now = self._clock()
            self._checked_at = now
            if self._unchanged():
                return False
            try:
                listed = os.stat(self._dir)
            except OSError:
                listed = None
            if listed is None or not self._dir.is_dir():
                self._dir_seen = None
                issue = PolicyIssue(str(self._dir), 1, DOCUMENT_FIELD, "policy_dir does not exist")
                return self._publish(self._state.loaded, {str(self._dir): (issue,)}, now)
            self._dir_seen = ((listed.st_mtime_ns, listed.st_ino), now)
            outcomes = self._scan(now)
            previous = self._state.loaded
            if self._state.version == 0 and self._archive is not None:
                previous = archived_policies(self._archive, self._dir, self._known)
            loaded, errors = _resolve(previous, outcomes)
            return self._publish(loaded, errors, now)

    def _unchanged(self) -> bool:
        """Stat only (the poll's common case): the directory and every file last read look
        as they did, and none of them changed within `RACY_WINDOW_S` of being read, so a scan
        would read nothing and change nothing. A file added, removed or renamed changes the
        directory's mtime; an edit in place, the file's own stat."""
        if self._dir_seen is None:
            return False
        listed, listed_at = self._dir_seen
        try:
            st = os.stat(self._dir)
            if (st.st_mtime_ns, st.st_ino) != listed or st.st_mtime >= listed_at - RACY_WINDOW_S:
                return False
            for file, seen in self._seen.items():
                st = os.stat(file)
                if (st.st_mtime_ns, st.st_size, st.st_ino) != seen.fingerprint:
                    return False
                if st.st_mtime >= seen.read_at - RACY_WINDOW_S:
                    return False
        except OSError:
            return False
        return True

    def _scan(self, now: float) -> dict[str, _Outcome]:
        outcomes: dict[str, _Outcome] = {}
        for path in policy_files(self._dir):
            seen = self._read(path, now)
            if seen is not None:
                outcomes[str(path)] = seen.outcome
        for file in set(self._seen) - set(outcomes):
            del self._seen[file]
        return outcomes

    def _read(self, path: Path, now: float) -> _Seen | None:
        file = str(path)
        try:
            st = path.stat()
            seen = self._seen.get(file)
            fingerprint = (st.st_mtime_ns, st.st_size, st.st_ino)
            settled = seen is not None and st.st_mtime < seen.read_at - RACY_WINDOW_S
            if seen is not None and seen.fingerprint == fingerprint and settled:
                return seen
            data = read_policy_bytes(path)
        except FileNotFoundError:  # deleted between listing and reading
            return None
        except OSError as exc:
            issue = PolicyIssue(file, 1, DOCUMENT_FIELD, f"cannot read: {exc}")
            return _Seen((0, 0, 0), now, 0.0, "", PolicyFileError([issue]))
        digest = hashlib.sha256(data).hexdigest()
        if seen is None or seen.content_sha256 != digest:
            outcome = checked(_load(data, path), self._known)
            if isinstance(outcome, LoadedPolicy):
                self._data[file] = data
            seen = _Seen(fingerprint, now, st.st_mtime, digest, outcome)
        else:
            seen = _Seen(fingerprint, now, st.st_mtime, digest, seen.outcome)
        self._seen[file] = seen
        return seen

    def _publish(
        self,
        loaded: Mapping[str, LoadedPolicy],
        errors: Mapping[str, tuple[PolicyIssue, ...]],
        now: float,
    ) -> bool:
        old = self._state
        same_policies = {t: p.content_sha256 for t, p in loaded.items()} == {
            t: p.content_sha256 for t, p in old.loaded.items()
        }
        if same_policies and dict(errors) == dict(old.errors):
            return False
        self._log_changes(old, loaded, errors)
        self._archive_changes(old, loaded)
        entries = {t: self._entry(p, old, now) for t, p in loaded.items()}
        by_hash = {k.sha256: (t, k.id) for t, p in loaded.items() for k in p.policy.api_keys}
        self._state = _State(
            version=old.version + 1,
            entries=MappingProxyType(entries),
            loaded=MappingProxyType(dict(loaded)),
            by_hash=MappingProxyType(by_hash),
            errors=MappingProxyType(dict(errors)),
        )
        return True

    def _archive_changes(self, old: _State, loaded: Mapping[str, LoadedPolicy]) -> None:
        if self._archive is None:
            return
        for tenant, policy in loaded.items():
            before = old.loaded.get(tenant)
            data = self._data.get(policy.file)
            if before is not None and before.content_sha256 == policy.content_sha256:
                continue
            if data is None or hashlib.sha256(data).hexdigest() != policy.content_sha256:
                continue  # an archived policy kept in force: already in the archive
            try:
                self._archive.save(tenant, data)
            except OSError:
                self._log.exception("cannot keep the last good policy of %s", tenant)

    def _entry(self, loaded: LoadedPolicy, old: _State, now: float) -> TenantEntry:
        tenant = loaded.policy.tenant
        previous = old.entries.get(tenant)
        if previous is not None and previous.content_sha256 == loaded.content_sha256:
            return previous
        seen = self._seen.get(loaded.file)
        mtime = seen.mtime if seen is not None else 0.0
        return TenantEntry(tenant, loaded.policy, loaded.file, mtime, now, loaded.content_sha256)

    def _log_changes(
        self,
        old: _State,
        loaded: Mapping[str, LoadedPolicy],
        errors: Mapping[str, tuple[PolicyIssue, ...]],
    ) -> None:
        for tenant in sorted(set(old.loaded) - set(loaded)):
            self._log.info("tenant %s removed", tenant)
        for tenant, policy in sorted(loaded.items()):
            before = old.loaded.get(tenant)
            if before is None or before.content_sha256 != policy.content_sha256:
                self._log.info("tenant %s loaded from %s", tenant, policy.file)
        for file, issues in sorted(errors.items()):
            if old.errors.get(file) != issues:
                kept = "; last good policy kept" if _tenant_of(file) in loaded else ""
                lines = "\n".join(str(issue) for issue in issues)
                self._log.error("invalid policy file %s%s:\n%s", file, kept, lines)


def _load(data: bytes, path: Path) -> _Outcome:
    try:
        return load_policy_bytes(data, path)
    except PolicyFileError as exc:
        return exc


def _tenant_of(file: str) -> str:
    return os.path.splitext(os.path.basename(file))[0]


def _resolve(
    previous: Mapping[str, LoadedPolicy], outcomes: Mapping[str, _Outcome]
) -> tuple[dict[str, LoadedPolicy], dict[str, tuple[PolicyIssue, ...]]]:
    """Pick each tenant's policy: the file's if valid, else the last good one.

    Incumbent keys win: a file that claims a key hash another tenant already holds is rejected,
    so adding a stolen key hash to one file can never lock out the tenant that owns it.
    """
    loaded: dict[str, LoadedPolicy] = {}
    errors: dict[str, tuple[PolicyIssue, ...]] = {}
    owners: dict[str, LoadedPolicy] = {}
    pending: list[LoadedPolicy] = []

    def accept(policy: LoadedPolicy) -> None:
        loaded[policy.policy.tenant] = policy
        owners.update((k.sha256, policy) for k in policy.policy.api_keys)

    for before in previous.values():
        outcome = outcomes.get(before.file)
        if outcome is None:
            continue  # file deleted: tenant removed
        if isinstance(outcome, PolicyFileError):
            errors[before.file] = outcome.issues
            accept(before)
        elif outcome.content_sha256 == before.content_sha256:
            accept(before)
        else:
            pending.append(outcome)
    for file, outcome in sorted(outcomes.items()):
        if isinstance(outcome, PolicyFileError) and file not in errors:
            errors[file] = outcome.issues
        elif isinstance(outcome, LoadedPolicy) and outcome.policy.tenant not in previous:
            pending.append(outcome)
    for candidate in sorted(pending, key=lambda p: p.file):
        conflicts = key_conflicts(candidate, owners)
        if not conflicts:
            accept(candidate)
            continue
        errors[candidate.file] = tuple(conflicts)
        incumbent = previous.get(candidate.policy.tenant)
        if incumbent is not None and not key_conflicts(incumbent, owners):
            accept(incumbent)
    return loaded, errors
