"""Reload checks names against the server configuration, and the last good policy survives a
restart through the archive (the gateway's on-disk one)."""

from __future__ import annotations

from pathlib import Path

from gateway.policy_archive import DirectoryArchive
from policies.last_good import KnownNames
from policies.model import hash_api_key
from policies.store import PolicyStore
from tests.policies.test_policy_store import ACME_KEY, write

KNOWN = KnownNames({"gpt-4o-mini", "smollm2"}, {"vllm-a", "openai-api"})


def acme(models: str, tpm: int = 100) -> str:
    return (
        "tenant: acme\n"
        "api_keys:\n"
        f'  - {{id: k1, sha256: "{hash_api_key(ACME_KEY)}"}}\n'
        f"models: {models}\n"
        "limits:\n"
        f"  tokens_per_minute: {tpm}\n"
    )


def test_a_misspelled_model_keeps_the_old_policy_and_names_file_line_field(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    write(policies / "acme.yaml", acme("[gpt-4o-mini]"))
    store = PolicyStore(policies, known=KNOWN)
    store.reload_now()
    assert store.get("acme") is not None
    write(policies / "acme.yaml", acme("[gpt-4o-mini, gtp-4o]", tpm=5))
    store.reload_now()
    kept = store.get("acme")
    assert kept is not None and kept.models == ("gpt-4o-mini",)
    [issue] = store.snapshot().errors
    assert (issue.file, issue.line, issue.field) == (str(policies / "acme.yaml"), 4, "models[1]")
    assert issue.reason == "no model named 'gtp-4o' in the server config"


def test_the_last_good_policy_survives_a_restart_with_a_broken_file(tmp_path: Path) -> None:
    policies, archive = tmp_path / "policies", DirectoryArchive(tmp_path / "last-good")
    policies.mkdir()
    write(policies / "acme.yaml", acme("[smollm2]", tpm=100))
    first = PolicyStore(policies, known=KNOWN, archive=archive)
    first.reload_now()
    assert (tmp_path / "last-good" / "acme.yaml").stat().st_mode & 0o777 == 0o600
    write(policies / "acme.yaml", "tenant: acme\nlimits: {tokens_per_minute: -1}\n")

    restarted = PolicyStore(policies, known=KNOWN, archive=archive)
    restarted.reload_now()
    served = restarted.get("acme")
    assert served is not None and served.limits.tokens_per_minute == 100
    assert restarted.tenant_for_key(ACME_KEY) is not None
    assert [e.field for e in restarted.snapshot().errors] == ["limits.tokens_per_minute"]

    write(policies / "acme.yaml", acme("[smollm2]", tpm=300))  # fixed: the new one wins
    restarted.reload_now()
    fixed = restarted.get("acme")
    assert fixed is not None and fixed.limits.tokens_per_minute == 300
    again = PolicyStore(policies, known=KNOWN, archive=archive)
    write(policies / "acme.yaml", "not: [valid")
    again.reload_now()
    latest = again.get("acme")
    assert latest is not None and latest.limits.tokens_per_minute == 300


def test_a_deleted_file_removes_the_tenant_even_with_an_archive(tmp_path: Path) -> None:
    policies, archive = tmp_path / "policies", DirectoryArchive(tmp_path / "last-good")
    policies.mkdir()
    write(policies / "acme.yaml", acme("[smollm2]"))
    PolicyStore(policies, archive=archive).reload_now()
    (policies / "acme.yaml").unlink()
    restarted = PolicyStore(policies, archive=archive)
    restarted.reload_now()
    assert restarted.get("acme") is None
