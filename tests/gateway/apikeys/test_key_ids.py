"""A key id names one key of a tenant: an issued key and a key of the tenant's policy file never
share one (the ledger, the quotas and the sessions name a key by tenant and id). A policy
reload that brings in an issued key's id: the file's key wins, the issued key is refused until
one of them is renamed. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib

from gateway.apikeys.keyring import KeyChain, Keyring
from gateway.apikeys.records import KeyRecords, KeyRequest
from gateway.ledger.db import session_factory
from policies.model import ApiKeyEntry, TenantPolicy
from tests.gateway.apikeys.test_keyring import Clock

YAML_SECRET = "lt-acme-policy-file-key-000000000000000000"


class ReloadingPolicies:
    """A policy store whose acme file is edited between calls, looked up by each key's hash."""

    def __init__(self) -> None:
        self.acme = TenantPolicy(tenant="acme", models=("smollm2",))

    def reload(self, *yaml_ids: str) -> None:
        digest = hashlib.sha256(YAML_SECRET.encode()).hexdigest()
        keys = tuple(ApiKeyEntry(id=key_id, sha256=digest) for key_id in yaml_ids)
        self.acme = self.acme.model_copy(update={"api_keys": keys})

    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        found = [k.id for k in self.acme.api_keys if k.sha256 == digest]
        return (self.acme, found[0]) if found else None

    def get(self, tenant: str) -> TenantPolicy | None:
        return self.acme if tenant == "acme" else None


def test_a_reload_that_brings_in_an_issued_keys_id_refuses_the_issued_key(engine) -> None:
    """Both keys authenticated as acme/bot: one spend, one set of limits, shared sessions."""
    clock = Clock()
    records = KeyRecords(session_factory(engine), clock)
    keyring = Keyring(session_factory(engine), clock)
    policies = ReloadingPolicies()
    chain = KeyChain(policies, keyring, clock)
    _, issued = records.issue(KeyRequest("acme", "bot"), "alice")
    keyring.refresh()
    found = chain.tenant_for_key(issued)
    assert found is not None and (found[0].tenant, found[1]) == ("acme", "bot")
    policies.reload("bot")  # the admin pastes a key named `bot` into acme.yaml
    found = chain.tenant_for_key(YAML_SECRET)
    assert found is not None and found[1] == "bot"
    assert chain.tenant_for_key(issued) is None  # the file's key wins
    assert chain.policy_for_key_id("acme", "bot") == policies.acme  # the file's, not narrowed
    policies.reload("bot-yaml")  # renamed in the file: the issued key calls again
    found = chain.tenant_for_key(issued)
    assert found is not None and found[1] == "bot"
