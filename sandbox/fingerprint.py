"""Idempotency keys and request fingerprints: validation, canonical JSON, derived tokens.

Pure functions; no I/O. A fingerprint covers everything that changes what would run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

from sandbox.errors import IdempotencyKeyInvalid

MAX_KEY_CHARS = 255
_KEY_CHARS = re.compile(r"^[\x21-\x7e]{1,255}$")
_SF_STRING = re.compile(r'^"((?:[\x20-\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$')


def parse_idempotency_key(header: str | None) -> str:
    """The header's key: a bare token or an RFC 8941 sf-string; 1-255 printable ASCII."""
    if header is None:
        raise IdempotencyKeyInvalid("the header is required (or x-session-id + tool_call_id)")
    value = header.strip()
    quoted = _SF_STRING.match(value)
    if quoted:
        value = re.sub(r"\\([\"\\])", r"\1", quoted.group(1))
    elif value.startswith('"'):
        raise IdempotencyKeyInvalid("malformed quoted string")
    if not value:
        raise IdempotencyKeyInvalid("empty key")
    if len(value) > MAX_KEY_CHARS:
        raise IdempotencyKeyInvalid(f"longer than {MAX_KEY_CHARS} characters")
    if not _KEY_CHARS.match(value):
        raise IdempotencyKeyInvalid("only printable ASCII without spaces is allowed")
    return value


def derive_key(session_id: str, tool_call_id: str) -> str:
    """A key for clients that send no header: the session plus the model's tool_call_id."""
    if not session_id or not tool_call_id:
        raise IdempotencyKeyInvalid("x-session-id and tool_call_id are both required")
    digest = hashlib.sha256(f"{session_id}\x00{tool_call_id}".encode()).hexdigest()
    return f"derived-{digest[:48]}"


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(value: object) -> str:
    """SHA-256 over the canonical JSON of the effective request."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def client_token(tenant: str, key: str) -> str:
    """ECS RunTask clientToken: deterministic per (tenant, key), 52 chars of base32 (<= 64)."""
    digest = hashlib.sha256(f"{tenant}\x00{key}".encode()).digest()
    return base64.b32encode(digest).decode().rstrip("=")[:52]
