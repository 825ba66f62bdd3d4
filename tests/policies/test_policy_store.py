"""PolicyStore: hot reload through the real poller, last-good fallback, key lookup, snapshot."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from policies.errors import PolicyIssue
from policies.model import hash_api_key
from policies.store import PolicyStore

ACME_KEY, BETA_KEY = "lt-acme-secret", "lt-beta-secret"


def policy(tenant: str, key: str, tpm: int | str, key_id: str = "k1") -> str:
    return (
        f"tenant: {tenant}\n"
        "api_keys:\n"
        f'  - {{id: {key_id}, sha256: "{hash_api_key(key)}"}}\n'
        "limits:\n"
        f"  tokens_per_minute: {tpm}\n"
    )


def write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_until(condition: Callable[[], bool], deadline_s: float = 2.0) -> bool:
    """True once `condition` holds; the policy contract is "in effect within 2 s"."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def polling_store(tmp_path: Path) -> Iterator[PolicyStore]:
    write(tmp_path / "acme.yaml", policy("acme", ACME_KEY, 100))
    store = PolicyStore(tmp_path)  # default poll interval (0.5 s)
    store.start()
    yield store
    store.stop()


def tpm(store: PolicyStore, tenant: str) -> int | None:
    found = store.get(tenant)
    return found.limits.tokens_per_minute if found is not None else None


def test_poller_applies_an_edit_within_two_seconds(
    polling_store: PolicyStore, tmp_path: Path
) -> None:
    assert tpm(polling_store, "acme") == 100
    write(tmp_path / "acme.yaml", policy("acme", ACME_KEY, 250))
    assert wait_until(lambda: tpm(polling_store, "acme") == 250)


def test_poller_keeps_last_good_policy_and_lists_the_error(
    polling_store: PolicyStore, tmp_path: Path
) -> None:
    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, "lots"))
    assert wait_until(lambda: polling_store.snapshot().errors != ())
    snapshot = polling_store.snapshot()
    assert snapshot.errors == (
        PolicyIssue(
            str(path),
            5,
            "limits.tokens_per_minute",
            "Input should be a valid integer, unable to parse string as an integer",
        ),
    )
    assert tpm(polling_store, "acme") == 100  # the last good policy still serves
    assert [t.tenant for t in snapshot.tenants] == ["acme"]
    write(path, policy("acme", ACME_KEY, 300))
    assert wait_until(lambda: tpm(polling_store, "acme") == 300)
    assert polling_store.snapshot().errors == ()


def test_poller_adds_and_removes_tenants(polling_store: PolicyStore, tmp_path: Path) -> None:
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 7))
    assert wait_until(lambda: tpm(polling_store, "beta") == 7)
    (tmp_path / "acme.yaml").unlink()
    assert wait_until(lambda: polling_store.get("acme") is None)
    assert polling_store.tenant_for_key(ACME_KEY) is None
    assert [t.tenant for t in polling_store.snapshot().tenants] == ["beta"]


def test_tenant_for_key(tmp_path: Path) -> None:
    write(tmp_path / "acme.yaml", policy("acme", ACME_KEY, 1, key_id="prod"))
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 2))
    store = PolicyStore(tmp_path)
    assert store.tenant_for_key(ACME_KEY) is None  # nothing loaded before the first scan
    store.reload_now()
    found = store.tenant_for_key(ACME_KEY)
    assert found is not None
    assert (found[0].tenant, found[1]) == ("acme", "prod")
    beta = store.tenant_for_key(BETA_KEY)
    assert beta is not None and (beta[0].tenant, beta[1]) == ("beta", "k1")
    assert store.tenant_for_key("lt-wrong") is None
    assert store.tenant_for_key(hash_api_key(ACME_KEY)) is None  # the hash is not the key


def test_key_rotation_revokes_the_old_key(tmp_path: Path) -> None:
    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, 1))
    store = PolicyStore(tmp_path)
    store.reload_now()
    write(path, policy("acme", "lt-new-key", 1, key_id="k2"))
    assert store.reload_now() is True
    assert store.tenant_for_key(ACME_KEY) is None
    found = store.tenant_for_key("lt-new-key")
    assert found is not None and found[1] == "k2"


def test_a_key_found_before_is_refused_at_once_after_a_reload(tmp_path: Path) -> None:
    """A rotated or removed key is refused by the first lookup after the reload, and an
    edited policy is the one the key gets."""
    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, 1))
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 2))
    store = PolicyStore(tmp_path)
    store.reload_now()
    first = store.tenant_for_key(ACME_KEY)
    assert first is not None and store.tenant_for_key(ACME_KEY) == first
    assert store.tenant_for_key(BETA_KEY) is not None
    write(path, policy("acme", ACME_KEY, 7))  # same key, another policy
    assert store.reload_now() is True
    edited = store.tenant_for_key(ACME_KEY)
    assert edited is not None and edited[0] != first[0] and edited[0] == store.get("acme")
    write(path, policy("acme", "lt-new-key", 1, key_id="k2"))  # rotated
    assert store.reload_now() is True
    assert store.tenant_for_key(ACME_KEY) is None
    assert store.tenant_for_key("lt-new-key") is not None
    (tmp_path / "beta.yaml").unlink()  # removed
    assert store.reload_now() is True
    assert store.tenant_for_key(BETA_KEY) is None


def test_incumbent_keeps_its_key_when_another_file_claims_it(tmp_path: Path) -> None:
    write(tmp_path / "zeta.yaml", policy("zeta", ACME_KEY, 1))
    store = PolicyStore(tmp_path)
    store.reload_now()
    write(tmp_path / "alpha.yaml", policy("alpha", ACME_KEY, 2))  # sorts first, claims zeta's key
    store.reload_now()
    found = store.tenant_for_key(ACME_KEY)
    assert found is not None and found[0].tenant == "zeta"
    assert store.get("alpha") is None
    assert [str(e) for e in store.snapshot().errors] == [
        f"{tmp_path}/alpha.yaml:3: api_keys[0].sha256: key hash already used by tenant 'zeta' "
        f"({tmp_path}/zeta.yaml:3)"
    ]
    (tmp_path / "zeta.yaml").unlink()  # the conflict goes away: alpha is accepted unchanged
    store.reload_now()
    found = store.tenant_for_key(ACME_KEY)
    assert found is not None and found[0].tenant == "alpha"
    assert store.snapshot().errors == ()


def test_same_size_edit_with_restored_mtime_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, 100))
    store = PolicyStore(tmp_path)
    store.reload_now()
    before = path.stat()
    path.write_text(policy("acme", ACME_KEY, 200), encoding="utf-8")  # same size, in place
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    store.reload_now()
    assert tpm(store, "acme") == 200


def test_snapshot_versions_and_times_come_from_the_injected_clock(tmp_path: Path) -> None:
    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, 100))
    clock = FakeClock(1000.0)
    store = PolicyStore(tmp_path, clock=clock)
    assert store.snapshot().version == 0
    assert store.reload_now() is True
    clock.now = 1010.0
    assert store.reload_now() is False  # nothing changed: same version, entry untouched
    snapshot = store.snapshot()
    assert (snapshot.version, snapshot.checked_at, snapshot.policy_dir) == (
        1,
        1010.0,
        str(tmp_path),
    )
    (entry,) = snapshot.tenants
    assert (entry.tenant, entry.file, entry.loaded_at) == ("acme", str(path), 1000.0)
    assert entry.mtime == path.stat().st_mtime
    assert entry.policy.limits.tokens_per_minute == 100
    clock.now = 1020.0
    write(path, policy("acme", ACME_KEY, 101))
    assert store.reload_now() is True
    assert store.snapshot().version == 2
    assert store.snapshot().tenants[0].loaded_at == 1020.0


def test_new_invalid_file_is_listed_without_a_tenant(tmp_path: Path) -> None:
    write(tmp_path / "acme.yaml", "tenant: acme\nbogus: 1\n")
    store = PolicyStore(tmp_path)
    store.reload_now()
    assert store.get("acme") is None
    assert [(e.line, e.field) for e in store.snapshot().errors] == [(2, "bogus")]


@pytest.mark.parametrize(
    "hostile",
    [
        "tenant: beta\nname: 2026-02-30\n",  # a date PyYAML cannot build: its ValueError
        "tenant: beta\nname: !!timestamp x\n",  # AttributeError
        "tenant: beta\nmodels: " + "[" * 2000 + "]" * 2000 + "\n",  # RecursionError
        "tenant: beta\nname: \x00\n",  # a character YAML refuses, raised by its reader
    ],
)
def test_one_tenants_unreadable_file_never_stops_the_others(tmp_path: Path, hostile: str) -> None:
    """Those errors escaped the loader: the scan raised, so the store started with no tenant,
    and later no tenant's edit took effect while the file was there."""
    write(tmp_path / "acme.yaml", policy("acme", ACME_KEY, 1))
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 2))
    store = PolicyStore(tmp_path)
    store.reload_now()
    write(tmp_path / "beta.yaml", hostile)
    write(tmp_path / "acme.yaml", policy("acme", ACME_KEY, 3))
    assert store.reload_now()
    acme, beta = store.get("acme"), store.get("beta")
    assert acme is not None and acme.limits.tokens_per_minute == 3
    assert beta is not None and beta.limits.tokens_per_minute == 2  # its last good policy
    assert [(e.file, e.line) for e in store.snapshot().errors] == [(str(tmp_path / "beta.yaml"), 1)]
    fresh = PolicyStore(tmp_path)
    fresh.reload_now()
    assert fresh.get("acme") is not None and fresh.get("beta") is None


def test_a_policy_file_over_1_mib_is_refused_and_the_last_good_kept(tmp_path: Path) -> None:
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 2))
    store = PolicyStore(tmp_path)
    store.reload_now()
    padding = "# " + "x" * 78 + "\n"
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 5) + padding * ((1 << 20) // 80 + 1))
    store.reload_now()
    beta = store.get("beta")
    assert beta is not None and beta.limits.tokens_per_minute == 2
    [error] = store.snapshot().errors
    assert error.reason == f"over {1 << 20} bytes: a policy file is at most 1 MiB"
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 5) + padding * 100)
    store.reload_now()
    beta = store.get("beta")
    assert beta is not None and beta.limits.tokens_per_minute == 5


def test_missing_directory_is_an_error_not_a_crash(tmp_path: Path) -> None:
    store = PolicyStore(tmp_path / "absent")
    store.reload_now()
    assert store.snapshot().errors == (
        PolicyIssue(str(tmp_path / "absent"), 1, "(document)", "policy_dir does not exist"),
    )
    assert store.snapshot().tenants == ()


def test_a_settled_unchanged_directory_is_only_stated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll's common case lists and reads nothing; every kind of change still reloads."""
    import policies.store as store_module

    path = tmp_path / "acme.yaml"
    write(path, policy("acme", ACME_KEY, 100))
    clock = FakeClock(time.time() + 10)  # every file and the directory are settled
    store = PolicyStore(tmp_path, clock=clock)
    listings: list[Path] = []
    real = store_module.policy_files
    monkeypatch.setattr(store_module, "policy_files", lambda d: listings.append(d) or real(d))
    assert store.reload_now() is True and len(listings) == 1
    assert store.reload_now() is False and len(listings) == 1  # stat only
    clock.now += 1
    assert store.reload_now() is False and store.snapshot().checked_at == clock.now
    path.write_text(policy("acme", ACME_KEY, 2000), encoding="utf-8")  # in place, longer
    clock.now = time.time() + 10
    assert store.reload_now() is True and tpm(store, "acme") == 2000
    write(tmp_path / "beta.yaml", policy("beta", BETA_KEY, 7))  # a new file
    clock.now = time.time() + 10
    assert store.reload_now() is True and tpm(store, "beta") == 7
    (tmp_path / "beta.yaml").unlink()
    clock.now = time.time() + 10
    assert store.reload_now() is True and store.get("beta") is None
    n = len(listings)
    assert store.reload_now() is False and len(listings) == n
