"""Checked reads of client JSON that name the JSON path on error, the cache-marker JSON both
wire formats share, and the schema of a JSON-schema response format, which every backend's
encoder reads. Pure; no schema of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.errors import WireFormatError
from adapters.types import CacheControl


def expect(value: Any, kind: type | tuple[type, ...], path: str) -> Any:
    """`value` if it has the JSON type `kind` (bool is never an int), else WireFormatError."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise WireFormatError(path, f"expected {names}")
    return value


def optional(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = body.get(key)
    return None if value is None else expect(value, kind, key)


def cache_control_at(part: Mapping[str, Any], path: str) -> CacheControl | None:
    """The `cache_control` marker of a block or content part, if any."""
    cc = part.get("cache_control")
    if cc is None:
        return None
    expect(cc, dict, f"{path}.cache_control")
    ttl = cc.get("ttl", "5m")
    if ttl not in ("5m", "1h"):
        raise WireFormatError(f"{path}.cache_control.ttl", "expected '5m' or '1h'")
    return CacheControl(ttl=ttl)


def with_cache_control(out: dict[str, Any], cc: CacheControl | None) -> dict[str, Any]:
    """`out` with Anthropic's `cache_control` JSON added when `cc` is set (5m is the default)."""
    if cc is not None:
        out["cache_control"] = (
            {"type": "ephemeral"} if cc.ttl == "5m" else {"type": "ephemeral", "ttl": cc.ttl}
        )
    return out


def json_schema_of(response_format: Any) -> dict[str, Any] | None:
    """The schema of OpenAI's `response_format: {"type": "json_schema", "json_schema":
    {"schema": ...}}`; None for any other format (JSON mode included)."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def depth_of(value: Any) -> int:
    """Nesting depth of a container of parsed JSON (1 for `{}` or `[]`); exact `type` tests,
    since parsed JSON holds only plain dicts and lists."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return deepest
