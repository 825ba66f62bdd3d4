"""A key id names a key within its tenant only: globex's key issued over the admin API with the id
of acme's key is not charged acme's spend (it was: the budget read summed the id's rows over
every tenant, and globex's fresh key met a 429 `key_budget` for acme's $0.148). A key id the
tenant already holds is a 409; two tenants may hold the same one; a policy reload that brings in
an issued key's id refuses the issued key. A real gateway and ledger."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from gateway.ledger.db import create_ledger_engine
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows
from tests.e2e.conftest import models_for
from tests.e2e.harness import ADMIN_TOKEN, RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
ACME_KEY, GLOBEX_KEY = "lt-acme-scope-key-0001", "lt-globex-scope-key-01"
CALL = {"model": "gpt-4o-mini", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    policies = tmp_path / "policies"
    policies.mkdir()
    write_policy(policies, "acme", ACME_KEY, models=["gpt-4o-mini"])  # its YAML key is `k1`
    digest = hashlib.sha256(GLOBEX_KEY.encode()).hexdigest()
    write_policy(policies, "globex", GLOBEX_KEY, models=["gpt-4o-mini"],
                 api_keys=[{"id": "g1", "sha256": digest}])  # fmt: skip
    with FakeUpstream() as fake:
        running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models_for(fake)))
        try:
            yield running
        finally:
            running.stop()


def wait_for(check: Callable[[], bool], within_s: float = 3.0) -> None:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within_s, "not effective within the deadline"
        time.sleep(0.05)


def issue(gateway: RunningGateway, **body: str) -> httpx.Response:
    return httpx.post(f"{gateway.url}/admin/keys", json=body, headers=ADMIN, timeout=10)


def chat(gateway: RunningGateway, key: str) -> int:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json=CALL, headers=headers, timeout=10
    ).status_code


def test_globex_key_with_acmes_key_id_is_not_charged_acmes_spend(
    gateway: RunningGateway,
) -> None:
    engine = create_ledger_engine(gateway.settings.database_url)
    acme_spend = UsageRow(
        id="acme-spend", ts=datetime.now(UTC), tenant="acme", key_id="k1", model="gpt-4o-mini",
        request_id="r1", status="ok", cost_usd="0.148",
    )  # fmt: skip
    insert_rows(engine, [acme_spend])
    engine.dispose()

    reply = issue(gateway, tenant="globex", id="k1", budget_usd="0.10", budget_window="day")
    assert reply.status_code == 201, reply.text
    wait_for(lambda: chat(gateway, reply.json()["key"]) == 200)

    spend = httpx.get(f"{gateway.url}/admin/reports/spend?dimension=key", headers=ADMIN).json()
    assert list(spend["series"]) == ["acme/k1"]  # the row is acme's, named by tenant and id


def test_a_key_id_is_unique_within_its_tenant_and_only_there(gateway: RunningGateway) -> None:
    taken = issue(gateway, tenant="acme", id="k1")  # acme.yaml's own key id
    assert taken.status_code == 409, taken.text
    assert taken.json()["error"]["message"] == "key id 'k1' is already a key of acme.yaml"
    assert issue(gateway, tenant="acme", id="bot").status_code == 201
    assert issue(gateway, tenant="globex", id="bot").status_code == 201
    again = issue(gateway, tenant="acme", id="bot")
    assert again.status_code == 409
    assert again.json()["error"]["message"] == "key id 'bot' is already taken in tenant 'acme'"

    unnamed = httpx.post(f"{gateway.url}/admin/keys/bot/revoke", headers=ADMIN)
    assert unnamed.status_code == 409 and "?tenant=" in unnamed.json()["error"]["message"]
    named = httpx.post(f"{gateway.url}/admin/keys/bot/revoke?tenant=globex", headers=ADMIN)
    assert named.status_code == 200 and named.json()["tenant"] == "globex"
    listed = httpx.get(f"{gateway.url}/admin/keys", headers=ADMIN).json()["keys"]
    assert [(k["tenant"], k["id"], k["revoked_at"] is None) for k in listed] == [
        ("acme", "bot", True),
        ("globex", "bot", False),
    ]


def test_a_policy_reload_that_takes_an_issued_keys_id_refuses_the_issued_key(
    gateway: RunningGateway, tmp_path: Path
) -> None:
    """acme's issued key `bot`, and a key `bot` pasted into acme.yaml later, both called as
    acme/bot: one spend, one set of limits, shared sessions. The file's key wins: the issued
    key is refused (and listed as shadowed) until one of them is renamed."""
    issued = issue(gateway, tenant="acme", id="bot")
    assert issued.status_code == 201, issued.text
    secret = issued.json()["key"]
    wait_for(lambda: chat(gateway, secret) == 200)
    pasted = "lt-acme-pasted-bot-key-01"

    def acme_yaml(pasted_id: str) -> None:
        keys = [(ACME_KEY, "k1"), (pasted, pasted_id)]
        api_keys = [{"id": i, "sha256": hashlib.sha256(k.encode()).hexdigest()} for k, i in keys]
        write_policy(tmp_path / "policies", "acme", ACME_KEY, models=["gpt-4o-mini"],
                     api_keys=api_keys)  # fmt: skip

    acme_yaml("bot")
    wait_for(lambda: chat(gateway, pasted) == 200)
    assert chat(gateway, secret) == 401
    listed = httpx.get(f"{gateway.url}/admin/keys?tenant=acme", headers=ADMIN).json()["keys"]
    assert [(k["id"], k["shadowed"]) for k in listed] == [("bot", True)]
    acme_yaml("bot-pasted")  # renamed in the file: the issued key calls again
    wait_for(lambda: chat(gateway, secret) == 200)
    assert chat(gateway, pasted) == 200
