"""Who is calling: API key (Bearer or x-api-key) → tenant policy, and the admin and metrics
token checks.

Key comparison is constant-time on SHA-256 hashes (done by the policy store).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from adapters.records import slot_init
from gateway.errors import AuthenticationFailed
from policies.model import TenantPolicy


class KeyLookup(Protocol):
    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None: ...


@slot_init
@dataclass(frozen=True, slots=True)
class Caller:
    tenant: TenantPolicy
    key_id: str


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key from `Authorization: Bearer <key>` or `x-api-key: <key>` (both SDKs' habits)."""
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def authenticate(headers: Mapping[str, str], keys: KeyLookup) -> Caller:
    key = presented_key(headers)
    if key is None:
        raise AuthenticationFailed("missing API key: send Authorization: Bearer <key> or x-api-key")
    found = keys.tenant_for_key(key)
    if found is None:
        raise AuthenticationFailed("invalid API key")
    return Caller(tenant=found[0], key_id=found[1])


def presents_token(headers: Mapping[str, str], token: str | None) -> bool:
    """Whether the caller presents `token` (constant-time); never when no token is set."""
    if not token:
        return False
    key = presented_key(headers)
    return key is not None and hmac.compare_digest(key.encode(), token.encode())


def is_admin(headers: Mapping[str, str], admin_token: str | None) -> bool:
    return presents_token(headers, admin_token)
