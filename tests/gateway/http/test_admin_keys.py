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
from gateway.http.admin_keys import (
    MAX_BODY_BYTES,
    KeyIssueBody,
    build_keys_router,
    check_key_request,
)
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


def test_a_key_id_of_the_policy_file_is_never_issued(api: Api) -> None:
    """A named id of acme.yaml is a 409; a generated id is drawn again until it is none of the
    file's (the draw did not look at the file: `k` + 8 hex digits could be one)."""
    reply = api.client.post("/admin/keys", json={"tenant": "acme", "id": "k1"}, headers=ADMIN)
    assert refused(reply, 409, "key_id_taken", "id") == "key id 'k1' is already a key of acme.yaml"
    taken = ApiKeyEntry(id="k00000000", sha256="1" * 64)
    policy = api.tenants.policies["acme"].model_copy(update={"api_keys": (taken,)})
    api.tenants.policies["acme"] = policy
    draws = iter([b"\0" * 4, b"\0" * 4, b"\x0a\x0b\x0c\x0d"])
    body = KeyIssueBody(tenant="acme")
    wanted = check_key_request(body, api.tenants.get, MODELS, lambda n: next(draws)[:n])
    assert wanted.key_id == "k0a0b0c0d"


def test_the_listing_shows_a_key_the_policy_file_shadows(api: Api) -> None:
    for key_id in ("bot", "k2"):
        body = {"tenant": "acme", "id": key_id}
        assert api.client.post("/admin/keys", json=body, headers=ADMIN).status_code == 201
    reload = (ApiKeyEntry(id="k1", sha256="0" * 64), ApiKeyEntry(id="k2", sha256="1" * 64))
    api.tenants.policies["acme"] = api.tenants.policies["acme"].model_copy(
        update={"api_keys": reload}
    )
    listed = api.client.get("/admin/keys", params={"tenant": "acme"}, headers=ADMIN).json()
    assert [(k["id"], k["shadowed"]) for k in listed["keys"]] == [("bot", False), ("k2", True)]


@pytest.mark.parametrize("path", ["/admin/keys", "/admin/keys/k9/expire"])
def test_a_key_body_past_64_kib_is_a_413_before_it_is_parsed(api: Api, path: str) -> None:
    """The keys API read and parsed up to the model doors' 32 MiB on the event loop."""
    padding = "x" * MAX_BODY_BYTES
    reply = api.client.post(path, json={"tenant": "acme", "id": padding}, headers=ADMIN)
    assert reply.status_code == 413, reply.text
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == ("max_body_bytes", "body")
    assert error["message"].endswith(f"limit of {MAX_BODY_BYTES} bytes")
    assert api.records.all() == []


def test_a_keys_models_are_stored_once_each_and_bounded(api: Api) -> None:
    """`models` went to a 4,096-character column as sent: a list with repeats or many long
    names was a 500 on PostgreSQL (and stored as sent on SQLite)."""
    body = {"tenant": "acme", "id": "dup", "models": ["smollm2", "gpt-4o-mini"] * 300}
    reply = api.client.post("/admin/keys", json=body, headers=ADMIN)
    assert reply.status_code == 201, reply.text
    assert reply.json()["models"] == ["smollm2", "gpt-4o-mini"]
    wide = [f"model-{n:04d}-with-a-long-name" for n in range(200)]
    api.tenants.policies["wide"] = TenantPolicy(tenant="wide", models=tuple(wide))
    reply = api.client.post("/admin/keys", json={"tenant": "wide", "models": wide}, headers=ADMIN)
    message = refused(reply, 400, "bad_key_request", "models")
    assert message.startswith("models: at most 4096 characters as a JSON list (got 200 names)")
    assert [k.key_id for k in api.records.all()] == ["dup"]


@pytest.mark.parametrize(
    ("method", "path", "body", "param", "says"),
    [
        ("post", "/admin/keys", {"tenant": "nobody"}, "tenant", "unknown tenant 'nobody'"),
        ("post", "/admin/keys", {"tenant": "acme", "id": "a b"}, "id", "key id 'a b': use"),
        ("post", "/admin/keys", {"tenant": "acme", "models": ["gpt-5"]}, "models", "models ['gpt-5']"),
        ("post", "/admin/keys", {"tenant": "acme", "models": [1]}, "models.0", "models.0: Input"),
        ("post", "/admin/keys", {"tenant": "acme", "budget_usd": "5"}, "budget_window", "budget_usd and"),
        ("post", "/admin/keys", {"tenant": "acme", "budget_usd": "5", "budget_window": "year"},
         "budget_window", "budget_window 'year': use day|week|month"),
        ("post", "/admin/keys", {"tenant": "acme", "budget_usd": "1e10", "budget_window": "day"},
         "budget_usd", "budget_usd: "),
        ("post", "/admin/keys", {"tenant": "acme", "expires_at": "2027-01-01T00:00:00"},
         "expires_at", "expires_at needs a UTC offset"),
        ("post", "/admin/keys", {"tenant": "acme", "expires_at": 30}, "expires_at",
         "expires_at: Value error, a date and time with a UTC offset"),
        ("post", "/admin/keys/k9/expire", {"expires_at": 0}, "expires_at",
         "expires_at: Value error, a date and time with a UTC offset"),
        ("post", "/admin/keys", [], "body", "body: Input should be a valid dictionary"),
        ("post", "/admin/keys/k9/expire", [], "body", "body: Input should be a valid dictionary"),
        ("post", "/admin/keys/k9/expire?tenant=Acme", None, "tenant", "tenant 'Acme': tenant ids"),
        ("post", "/admin/keys/k9/revoke?tenant=Acme", None, "tenant", "tenant 'Acme': tenant ids"),
        ("get", "/admin/keys?tenant=Acme", None, "tenant", "tenant 'Acme': tenant ids"),
        ("get", "/admin/keys?limit=0", None, "limit", "limit: a count of keys"),
        ("get", "/admin/keys?after=acme", None, "after", "after: the next_after"),
    ],
)  # fmt: skip
def test_every_bad_request_is_a_400_naming_its_field(
    api: Api, method: str, path: str, body: object, param: str, says: str
) -> None:
    """Refusals said what was wrong in text only (`param` was null), a bad `?tenant=` on expire
    and revoke was a 404 `no key`, an expire with `[]` for a body expired the key now, and an
    expiry sent as a number was read as seconds since 1970."""
    api.client.post("/admin/keys", json={"tenant": "acme", "id": "k9"}, headers=ADMIN)
    sent = {"json": body} if body is not None else {}
    reply = api.client.request(method.upper(), path, headers=ADMIN, **sent)
    assert refused(reply, 400, "bad_key_request", param).startswith(says)
    assert [k.expires_at for k in api.records.all()] == [None]


def test_an_unknown_key_is_a_404_that_echoes_a_bounded_id(api: Api) -> None:
    reply = api.client.post(f"/admin/keys/{'x' * 3000}/revoke", headers=ADMIN)
    assert refused(reply, 404, "key_not_found", "id") == f"no key {'x' * 80!r}"
    reply = api.client.post("/admin/keys/k9/revoke", params={"tenant": "acme"}, headers=ADMIN)
    assert refused(reply, 404, "key_not_found", "id") == "no key 'k9' in tenant 'acme'"
