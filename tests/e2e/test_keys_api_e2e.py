"""`/admin/keys` against a real gateway: an issued key works within 2 s, honours its model
subset and budget, runs tools, is recorded by key id in the ledger, and stops within 2 s of
revocation."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import httpx
import sqlalchemy as sa

from gateway.ledger.db import create_ledger_engine
from tests.e2e.harness import (
    ADMIN_TOKEN,
    RunningGateway,
    start_gateway,
    write_config,
    write_policy,
)
from tests.fakes.upstream import FakeUpstream

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
CALL = {"model": "gpt-4o-mini", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def wait_for(check: Callable[[], bool], within_s: float = 2.0) -> float:
    """Seconds until `check()` held; fails the test past `within_s`."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within_s, "not effective within the deadline"
        time.sleep(0.05)
    return time.monotonic() - start


def chat(gateway: RunningGateway, key: str, model: str = "gpt-4o-mini") -> int:
    body = {**CALL, "model": model}
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    return reply.status_code


def test_issue_use_and_revoke_a_key(gateway: RunningGateway) -> None:
    reply = httpx.post(
        f"{gateway.url}/admin/keys",
        json={"tenant": "acme", "id": "ci-bot", "models": ["gpt-4o-mini"]},
        headers=ADMIN,
    )
    assert reply.status_code == 201, reply.text
    issued = reply.json()
    assert (issued["id"], issued["tenant"], issued["models"]) == ("ci-bot", "acme", ["gpt-4o-mini"])
    key = issued["key"]
    assert key.startswith("lt-") and "sha256" not in issued
    wait_for(lambda: chat(gateway, key) == 200)
    assert chat(gateway, key, "claude-sonnet-4-5") == 403  # outside the key's model subset
    listed = httpx.get(f"{gateway.url}/admin/keys?tenant=acme", headers=ADMIN).json()["keys"]
    assert [k["id"] for k in listed] == ["ci-bot"] and "key" not in listed[0]

    revoked = httpx.post(f"{gateway.url}/admin/keys/ci-bot/revoke", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    wait_for(lambda: chat(gateway, key) == 401)

    engine = create_ledger_engine(gateway.settings.database_url)
    deadline = time.monotonic() + 5
    with engine.connect() as db:
        while True:
            rows = db.execute(sa.text("SELECT key_id FROM usage WHERE tenant = 'acme'")).all()
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        audit = db.execute(
            sa.text("SELECT actor, action, target FROM admin_audit ORDER BY id")
        ).all()
    engine.dispose()
    assert {r.key_id for r in rows} == {"ci-bot"}  # the id, never the secret
    assert [tuple(a) for a in audit] == [
        ("admin-token", "key.issue", "acme/ci-bot"),
        ("admin-token", "key.revoke", "acme/ci-bot"),
    ]


def test_expired_and_over_budget_keys_are_refused(gateway: RunningGateway) -> None:
    reply = httpx.post(
        f"{gateway.url}/admin/keys",
        json={"tenant": "acme", "budget_usd": "0", "budget_window": "day"},
        headers=ADMIN,
    )
    assert reply.status_code == 201, reply.text
    broke = reply.json()
    wait_for(lambda: chat(gateway, broke["key"]) == 429)  # a $0 budget is spent already
    assert Decimal(broke["budget_usd"]) == 0

    key = httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "acme"}, headers=ADMIN).json()
    wait_for(lambda: chat(gateway, key["key"]) == 200)
    expired = httpx.post(f"{gateway.url}/admin/keys/{key['id']}/expire", json={}, headers=ADMIN)
    assert expired.status_code == 200
    wait_for(lambda: chat(gateway, key["key"]) == 401)


def test_bad_key_requests_say_what_is_accepted(gateway: RunningGateway) -> None:
    def issue(body: dict[str, object]) -> httpx.Response:
        return httpx.post(f"{gateway.url}/admin/keys", json=body, headers=ADMIN)

    unknown = issue({"tenant": "ACME"})
    assert unknown.status_code == 400
    assert "tenant ids are lowercase" in unknown.json()["error"]["message"]
    model = issue({"tenant": "other", "models": ["gpt-4o-mini"]})
    assert model.status_code == 400 and "claude-sonnet-4-5" in model.json()["error"]["message"]
    window = issue({"tenant": "acme", "budget_usd": "5", "budget_window": "year"})
    assert window.status_code == 400 and "day|week|month" in window.json()["error"]["message"]
    assert issue({"tenant": "acme", "colour": "red"}).status_code == 400
    assert httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "acme"}).status_code == 401
    missing = httpx.post(f"{gateway.url}/admin/keys/nope/revoke", headers=ADMIN)
    assert missing.status_code == 404


def test_spend_views_answer_with_the_reports_of_the_console(gateway: RunningGateway) -> None:
    assert chat(gateway, "lt-acme-secret-key-0001") == 200
    deadline = time.monotonic() + 5
    while True:
        spend = httpx.get(f"{gateway.url}/admin/reports/spend?dimension=key", headers=ADMIN)
        document = spend.json()
        if document["series"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert spend.status_code == 200 and list(document["series"]) == ["acme/k1"]
    assert document["currency"] == "USD"
    top = httpx.get(f"{gateway.url}/admin/reports/sessions?limit=5", headers=ADMIN).json()
    assert [s["tenant"] for s in top["sessions"]] == ["acme"]
    budgets = httpx.get(f"{gateway.url}/admin/reports/budgets", headers=ADMIN).json()
    assert {b["tenant"] for b in budgets} == {"acme", "other"}
    bad = httpx.get(f"{gateway.url}/admin/reports/spend?dimension=colour", headers=ADMIN)
    assert bad.status_code == 400 and "tenant|model|backend|key" in bad.json()["error"]["message"]


TOOL = {
    "name": "run_python",
    "runner": "local",
    "command": ["python3", "-c", "{code}"],
    "egress": [],
    "limits": {"wall_s": 20, "memory_mb": 256, "cpu_s": 10, "output_kb": 4},
}


def test_an_issued_key_runs_tools_until_it_is_revoked(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", "lt-acme-yaml-key-0001", tools=[TOOL])
    with FakeUpstream() as fake:
        models = [{"name": "gpt-4o-mini", "backends": [{
            "kind": "openai_compatible", "name": "fake", "base_url": fake.openai_base_url,
            "model": "gpt-4o-mini",
        }]}]  # fmt: skip
        gateway = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
        try:
            issued = httpx.post(
                f"{gateway.url}/admin/keys",
                json={"tenant": "acme", "id": "tool-bot"},
                headers=ADMIN,
            )
            assert issued.status_code == 201, issued.text
            key = issued.json()["key"]
            runs = f"{gateway.url}/v1/tools/runs"

            def run(step: str) -> httpx.Response:
                body = {"tool": "run_python", "arguments": {"code": "print(6*7)"}}
                headers = {"authorization": f"Bearer {key}", "idempotency-key": step}
                return httpx.post(runs, json=body, headers=headers, timeout=60)

            wait_for(lambda: run("probe").status_code != 401)
            first = run("step-1")
            assert first.status_code == 200, first.text
            assert (first.json()["status"], first.json()["stdout"]) == ("succeeded", "42\n")
            fetched = httpx.get(
                f"{runs}/{first.json()['id']}", headers={"authorization": f"Bearer {key}"}
            )
            assert fetched.status_code == 200 and fetched.json()["id"] == first.json()["id"]

            revoked = httpx.post(f"{gateway.url}/admin/keys/tool-bot/revoke", headers=ADMIN)
            assert revoked.status_code == 200
            wait_for(lambda: run("step-2").status_code == 401)
            assert run("step-1").json()["error"]["message"] == "invalid API key"
        finally:
            gateway.stop()
