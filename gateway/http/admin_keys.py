"""`/admin/keys`: issue (the secret is in the reply, once), list, expire and revoke API keys.

Guarded by the admin token, checked before a byte of a body is read (the handlers read their
own bodies); every change is audited by `KeyRecords`. Database work runs in a thread. Bad
input is a 400 naming the field (`param`); an unknown key id is a 404; a key id the tenant
already holds (issued or in its YAML), or one several tenants hold named without `?tenant=`,
is a 409, as is a key past the tenant's bound on live keys.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from gateway.apikeys.records import (
    KEY_ID,
    TENANT_ID,
    IssuedKey,
    KeyIdConflict,
    KeyLimitReached,
    KeyNotFound,
    KeyRecords,
    KeyRequest,
    check_tenant,
)
from gateway.apikeys.records import KeyRequestInvalid as Invalid
from gateway.errors import AuthenticationFailed, BodyTooLarge, ClientGone
from gateway.http.admin_routes import json_response
from gateway.http.api_schema import OpenAIError, errors, json_body
from gateway.http.auth import is_admin
from gateway.http.chat_routes import error_response
from gateway.http.error_shapes import error_body
from gateway.http.request_body import BodyLimits, read_body
from gateway.keys import RandomBytes, generate_key_id
from policies.model import TenantPolicy

ADMIN_ACTOR = "admin-token"
# a key request is a few short fields: a larger body is refused before it is read or parsed
MAX_BODY_BYTES = 64 * 1024
MAX_ID_DRAWS = 16  # generated ids tried against the policy file's before giving up
MAX_KEYS_PAGE = 1000  # keys in one listing: `next_after` names where the next one starts
LISTING_QUERY = [
    {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer"},
     "description": f"keys per page, 1 to {MAX_KEYS_PAGE} (the default)"},
    {"name": "after", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "the previous page's next_after (tenant/key id)"},
]  # fmt: skip
# what `_refusal` answers: a bad body, an unknown or ambiguous key, a body over the limit
REFUSALS = (ValidationError, Invalid, KeyNotFound, KeyIdConflict, BodyTooLarge, ClientGone)


def _not_a_number(value: object) -> object:
    """An expiry is a date and time only: pydantic would read a number as seconds since 1970
    (`"expires_at": 30`, meant as days, a key expired in 1970)."""
    if isinstance(value, int | float):
        raise ValueError(
            "a date and time with a UTC offset (e.g. 2026-12-31T00:00:00Z), not a number"
        )
    return value


Instant = Annotated[datetime, BeforeValidator(_not_a_number)]


class KeyIssueBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(description="tenant id: lowercase letters, digits, '_' or '-'")
    id: str | None = Field(default=None, description="key id (default: k + 8 hex digits)")
    models: list[str] | None = Field(default=None, description="subset of the tenant's models")
    budget_usd: Decimal | None = Field(default=None, ge=0)
    budget_window: str | None = Field(default=None, description="day | week | month")
    expires_at: Instant | None = None


class KeyExpireBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expires_at: Instant | None = Field(default=None, description="default: now")


def key_document(key: IssuedKey, tenants: Callable[[str], TenantPolicy | None]) -> dict[str, Any]:
    """A key as the admin API shows it: never the secret, never the hash. `shadowed`: the
    tenant's policy file holds a key of the same id, which wins (this key is refused)."""
    policy = tenants(key.tenant)
    return {
        "id": key.key_id,
        "tenant": key.tenant,
        "models": list(key.models) if key.models is not None else None,
        "budget_usd": str(key.budget_usd) if key.budget_usd is not None else None,
        "budget_window": key.budget_window,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
        "created_at": key.created_at.isoformat(),
        "created_by": key.created_by,
        "shadowed": policy is not None and any(k.id == key.key_id for k in policy.api_keys),
    }


def check_key_request(
    body: KeyIssueBody,
    tenants: Callable[[str], TenantPolicy | None],
    model_names: list[str],
    random_bytes: RandomBytes = secrets.token_bytes,
) -> KeyRequest:
    """The request, once its tenant and models are known ones (KeyRequestInvalid otherwise),
    with its key id: the one asked for, which must not be a key of the tenant's policy file
    (KeyIdConflict), else a fresh one that is none either."""
    policy = tenants(body.tenant)
    if policy is None:
        raise Invalid(
            f"unknown tenant {body.tenant!r}: tenant ids are lowercase (a-z, 0-9, '_', '-') "
            "and name a policy file in policy_dir",
            "tenant",
        )
    allowed = list(policy.models) or model_names
    unknown = [m for m in body.models or () if m not in allowed]
    if unknown:
        raise Invalid(
            f"models {unknown} are not allowed for {body.tenant}; use {allowed}", "models"
        )
    in_policy = {k.id for k in policy.api_keys}
    if body.id is not None and body.id in in_policy:
        raise KeyIdConflict(f"key id {body.id!r} is already a key of {body.tenant}.yaml", "id")
    key_id = body.id or _fresh_key_id(in_policy, random_bytes)
    models = tuple(dict.fromkeys(body.models)) if body.models is not None else None  # once each
    return KeyRequest(
        body.tenant, key_id, models, body.budget_usd, body.budget_window, body.expires_at
    )


def _fresh_key_id(taken: set[str], random_bytes: RandomBytes) -> str:
    """A generated key id that no key of the policy file holds (one in 2**32 would)."""
    for _ in range(MAX_ID_DRAWS):
        key_id = generate_key_id(random_bytes)
        if key_id not in taken:
            return key_id
    raise KeyIdConflict(f"no fresh key id in {MAX_ID_DRAWS} draws: name one", "id")


def build_keys_router(
    admin_token: str | None,
    records: KeyRecords,
    tenants: Callable[[str], TenantPolicy | None],
    model_names: list[str],
    limits: BodyLimits,
) -> APIRouter:
    router = APIRouter()
    answers = {**errors(OpenAIError, 400, 401, 404, 409, 413)}

    @router.post(
        "/admin/keys", status_code=201, responses=answers, openapi_extra=json_body(KeyIssueBody)
    )
    async def issue(request: Request) -> Response:
        if not is_admin(request.headers, admin_token):
            return _denied()
        try:
            body = KeyIssueBody.model_validate(await _read_json(request, limits))
            wanted = check_key_request(body, tenants, model_names)
            key, secret = await asyncio.to_thread(records.issue, wanted, ADMIN_ACTOR)
        except REFUSALS as exc:
            return _refusal(exc)
        return json_response({**key_document(key, tenants), "key": secret}, 201)

    @router.get("/admin/keys", responses=answers, openapi_extra={"parameters": LISTING_QUERY})
    async def listing(request: Request, tenant: str | None = None) -> Response:
        if not is_admin(request.headers, admin_token):
            return _denied()
        try:
            after, limit = listing_page(request.query_params)
            keys, more = await asyncio.to_thread(records.page, tenant, after, limit)
        except Invalid as exc:
            return _refusal(exc)
        return json_response(listing_document(keys, more, tenants))

    @router.post("/admin/keys/{key_id}/expire", responses=answers)
    async def expire(request: Request, key_id: str, tenant: str | None = None) -> Response:
        if not is_admin(request.headers, admin_token):
            return _denied()
        try:
            named = check_tenant(tenant)
            body = await _read_json(request, limits, required=False)
            at = KeyExpireBody.model_validate({} if body is None else body).expires_at
            key = await asyncio.to_thread(records.expire, key_id, at, ADMIN_ACTOR, named)
        except REFUSALS as exc:
            return _refusal(exc)
        return json_response(key_document(key, tenants))

    @router.post("/admin/keys/{key_id}/revoke", responses=answers)
    async def revoke(request: Request, key_id: str, tenant: str | None = None) -> Response:
        if not is_admin(request.headers, admin_token):
            return _denied()
        try:
            named = check_tenant(tenant)
            key = await asyncio.to_thread(records.revoke, key_id, ADMIN_ACTOR, named)
        except (Invalid, KeyNotFound) as exc:
            return _refusal(exc)
        return json_response(key_document(key, tenants))

    return router


def listing_document(
    keys: list[IssuedKey], more: bool, tenants: Callable[[str], TenantPolicy | None]
) -> dict[str, Any]:
    """A page of keys, and where the next one starts (`next_after`; None on the last)."""
    following = f"{keys[-1].tenant}/{keys[-1].key_id}" if more else None
    return {"keys": [key_document(k, tenants) for k in keys], "next_after": following}


def listing_page(query: Mapping[str, str]) -> tuple[tuple[str, str] | None, int]:
    """`?after=tenant/id` (the listing's `next_after`) and `?limit=` (1 to MAX_KEYS_PAGE, the
    default); KeyRequestInvalid naming the parameter otherwise."""
    text = query.get("limit", str(MAX_KEYS_PAGE))
    if not (
        text.isascii()
        and text.isdigit()
        and len(text) <= len(str(MAX_KEYS_PAGE))
        and 1 <= int(text) <= MAX_KEYS_PAGE
    ):
        raise Invalid(
            f"limit: a count of keys from 1 to {MAX_KEYS_PAGE}, got {text[:40]!r}", "limit"
        )
    after = query.get("after")
    if after is None:
        return None, int(text)
    tenant, _, key_id = after.partition("/")
    if not (TENANT_ID.fullmatch(tenant) and KEY_ID.fullmatch(key_id)):
        raise Invalid(
            f"after: the next_after of a listing (tenant/key id), got {after[:80]!r}", "after"
        )
    return (tenant, key_id), int(text)


async def _read_json(request: Request, limits: BodyLimits, required: bool = True) -> Any:
    """The JSON body, read up to MAX_BODY_BYTES (or the doors' limit, if lower; BodyTooLarge
    past it); KeyRequestInvalid when it is not JSON, or empty though `required`."""
    raw = await read_body(request, min(limits.max_bytes, MAX_BODY_BYTES))
    if not raw.strip() and not required:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Invalid(f"body: not valid JSON ({exc})", "body") from None


def _denied() -> Response:
    return error_response(AuthenticationFailed("admin token required"), "openai")


def _refusal(exc: Exception) -> Response:
    """A refused key request as the client's error: the doors' 413 for a body over the limit,
    404 for an unknown key, 409 for a key id taken (or shared by tenants and named without
    one) or a tenant at its live keys' bound, else 400."""
    if isinstance(exc, BodyTooLarge | ClientGone):
        return error_response(exc, "openai")
    kind = "invalid_request_error"
    if isinstance(exc, KeyNotFound):
        return json_response(error_body("openai", kind, kind, str(exc), "key_not_found", "id"), 404)
    if isinstance(exc, KeyIdConflict | KeyLimitReached):
        rule = "key_id_taken" if isinstance(exc, KeyIdConflict) else "too_many_keys"
        return json_response(error_body("openai", kind, kind, str(exc), rule, exc.field), 409)
    field: str | None
    if isinstance(exc, ValidationError):
        message, field = first_problem(exc), problem_field(exc)
    else:
        message, field = str(exc).splitlines()[0], getattr(exc, "field", None)
    return json_response(error_body("openai", kind, kind, message, "bad_key_request", field), 400)


def first_problem(exc: ValidationError) -> str:
    """The first field a key request got wrong, and why (`budget_usd: Input should be ...`)."""
    return f"{problem_field(exc)}: {exc.errors()[0]['msg']}"


def problem_field(exc: ValidationError) -> str:
    """The first field a key request got wrong (`models.0`), `body` when it is no object."""
    return ".".join(str(p) for p in exc.errors()[0]["loc"]) or "body"
