"""A JSON view of everything `prepare` hands downstream, for golden comparisons."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import orjson

from gateway.ports import PreparedPrompt


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def prepared_view(prepared: PreparedPrompt) -> dict[str, str]:
    """SHA-256 of each thing `prepare` hands on: the body as the exact bytes sent upstream, the
    typed request field by field (key order of free-form JSON kept), the keys and hashes."""
    return {name: _digest(value) for name, value in _fields(prepared).items()}


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value)).hexdigest()


def _fields(prepared: PreparedPrompt) -> dict[str, Any]:
    return {
        "body": orjson.dumps(prepared.body).decode(),
        "request": orjson.dumps(_request(prepared)).decode(),
        "session_root": prepared.session_root,
        "cache_salt": prepared.cache_salt,
        "prefix_hashes": [h.hex() for h in prepared.prefix_hashes],
        "stable_prefix_tokens": prepared.stable_prefix_tokens,
        "write_ttl": prepared.write_ttl,
        "facts": orjson.dumps(_plain(getattr(prepared.diagnosis, "fingerprint", None))).decode(),
    }


def _request(prepared: PreparedPrompt) -> dict[str, Any]:
    """The typed request's fields; `cache_public` (set by the pipeline per backend call, never
    by `prepare`) only when set, so the recorded digests keep their meaning."""
    fields = _plain(prepared.request)
    if fields.get("cache_public") is None:
        fields.pop("cache_public", None)
    return fields
