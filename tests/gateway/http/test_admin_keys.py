"""`/admin/keys` in process, over a real ledger database (SQLite and PostgreSQL): each refusal
is the 4xx of OpenAI's error shape, with the rule as `code` and the field as `param`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from gateway.apikeys.records import KeyRecords
from gateway.http.admin_keys import build_keys_router
from gateway.http.request_body import BodyLimits
from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from policies.model import ApiKeyEntry, TenantPolicy

TOKEN = "admin-token-for-the-keys-api-tests"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
MODELS = ["gpt-4o-mini", "smollm2"]


@dataclass
class Tenants:
    policies: dict[str, TenantPolicy]

    def get(self, tenant: str) -> TenantPolicy | None:
        return self.policies.get(tenant)


@dataclass
class Api:
    client: TestClient
    records: KeyRecords
    tenants: Tenants


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def api(request: pytest.FixtureRequest, tmp_path) -> Iterator[Api]:
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path}/ledger.db"
    )
    migrate(url)
    engine = create_ledger_engine(url)
    records = KeyRecords(session_factory(engine), lambda: datetime.now(UTC), max_live_per_tenant=2)
    yaml_key = ApiKeyEntry(id="k1", sha256="0" * 64)
    tenants = Tenants({
        "acme": TenantPolicy(tenant="acme", models=tuple(MODELS), api_keys=(yaml_key,)),
        "globex": TenantPolicy(tenant="globex"),
    })  # fmt: skip
    app = FastAPI()
    app.include_router(
        build_keys_router(TOKEN, records, tenants.get, MODELS, BodyLimits.from_settings())
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, records, tenants)
    engine.dispose()


def refused(reply, status: int, code: str, param: str | None) -> str:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    return str(error["message"])


def test_a_tenant_past_its_live_keys_is_a_409_naming_the_tenant(api: Api) -> None:
    for key_id in ("a", "b"):
        assert api.client.post("/admin/keys", json={"tenant": "acme", "id": key_id},
                               headers=ADMIN).status_code == 201  # fmt: skip
    reply = api.client.post("/admin/keys", json={"tenant": "acme"}, headers=ADMIN)
    message = refused(reply, 409, "too_many_keys", "tenant")
    assert message.startswith("tenant 'acme' holds 2 live keys")
    assert (
        api.client.post("/admin/keys", json={"tenant": "globex"}, headers=ADMIN).status_code == 201
    )
    assert api.client.post("/admin/keys/a/revoke", headers=ADMIN).status_code == 200
    assert api.client.post("/admin/keys", json={"tenant": "acme"}, headers=ADMIN).status_code == 201
