"""Canonical order: tools sorted by name (declared-public tools first), JSON keys sorted.

Pure functions over the client's wire JSON (the typed request is decoded from their result);
returns new values, never mutates its inputs, and never changes what a JSON value means
(object key order and the order of a schema's `required` names carry no meaning; every other
array keeps its order).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping

import orjson

from adapters.types import JSON, ToolSpec

IsPublicTool = Callable[[str, bytes], bool]  # (tool name, canonical digest) -> declared public
SCHEMA_MEMO_MAX_BYTES = 16_000_000  # schema JSON held by `SchemaMemo` (a 32 MiB body fits once)


def sort_json(value: JSON) -> JSON:
    """The same JSON value with every object's keys in sorted order."""
    if isinstance(value, Mapping):
        return {key: sort_json(value[key]) for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [sort_json(item) for item in value]
    return value


def canonical_schema(schema: JSON) -> JSON:
    """A JSON schema with sorted keys and sorted `required` name lists (a set in meaning)."""
    if isinstance(schema, Mapping):
        out: dict[str, JSON] = {}
        for key in sorted(schema):
            item = schema[key]
            is_name_list = isinstance(item, list) and all(isinstance(x, str) for x in item)
            out[key] = (
                sorted(item) if key == "required" and is_name_list else canonical_schema(item)
            )
        return out
    if isinstance(schema, list | tuple):
        return [canonical_schema(item) for item in schema]
    return schema


class SchemaMemo:
    """`canonical_schema` memoised by the schema's JSON bytes (key order included: two spellings
    are two entries). An agent sends the same tool schemas on every call. The results are
    shared between calls, so they are read-only (nothing in cachekeys edits a schema in place).
    A pure memo (a lost entry costs a recomputation): bounded by entries and by schema bytes,
    not per tenant."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = SCHEMA_MEMO_MAX_BYTES) -> None:
        self._memo: dict[bytes, JSON] = {}
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._num_bytes = 0

    def canonical(self, schema: JSON) -> JSON:
        try:
            key = orjson.dumps(schema)
        except TypeError:  # not plain JSON (a huge int, a non-str key): no memo
            return canonical_schema(schema)
        found = self._memo.get(key)
        if found is None:
            found = canonical_schema(schema)
            if len(key) > self._max_bytes:
                return found
            if len(self._memo) >= self._max_entries or self._num_bytes + len(key) > self._max_bytes:
                self._memo.clear()  # a bound, not an LRU: a working set this large is unusual
                self._num_bytes = 0
            self._memo[key] = found
            self._num_bytes += len(key)
        return found


def canonical_arguments(arguments_json: str) -> str:
    """Tool-call arguments with sorted keys; text that is not JSON is returned unchanged."""
    try:
        value = json.loads(arguments_json)
    except ValueError:
        return arguments_json
    return json.dumps(sort_json(value), ensure_ascii=False, separators=(",", ":"))


def json_bytes(value: JSON) -> bytes:
    """The canonical bytes of a JSON value: sorted keys, no spaces, UTF-8."""
    return json.dumps(sort_json(value), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def tool_digest(tool: ToolSpec) -> bytes:
    """SHA-256 of a tool's canonical definition, the same for either wire format."""
    body = {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
    return hashlib.sha256(json_bytes(body)).digest()


def raw_tool_digest(wire: str, tool: Mapping[str, JSON]) -> bytes:
    """`tool_digest` of a raw OpenAI or Anthropic tool definition (cache markers ignored)."""
    function = tool.get("function") if wire == "openai" else None
    if isinstance(function, Mapping):
        body: JSON = {
            "name": function.get("name", ""),
            "description": function.get("description", ""),
            "input_schema": function.get("parameters", {}),
        }
    elif wire == "anthropic" and "input_schema" in tool:
        body = {k: tool.get(k, "") for k in ("name", "description", "input_schema")}
    else:
        body = {k: v for k, v in tool.items() if k != "cache_control"}
    return hashlib.sha256(json_bytes(body)).digest()


def tool_order_key(name: str, is_public: bool) -> tuple[int, str]:
    """Declared-public tools first (so the shareable prefix is one run), then by name."""
    return (0 if is_public else 1, name)


# --- tools in a wire body ----------------------------------------------------------------


def raw_tool_name(wire: str, tool: Mapping[str, JSON]) -> str:
    if wire == "openai":
        function = tool.get("function")
        return (
            str(function.get("name", ""))
            if isinstance(function, Mapping)
            else str(tool.get("type", ""))
        )
    return str(tool.get("name", ""))


def raw_tool_schema_key(wire: str) -> str:
    return "parameters" if wire == "openai" else "input_schema"


def order_tools(wire: str, tools: list[JSON], is_public: IsPublicTool | None) -> list[JSON]:
    """Tools in canonical order. A client marker on the tools level (Anthropic) means "cache
    the tools": it moves to the new last tool, with the longer TTL if it had several.
    `is_public` None: no tool is declared public (no digests needed to order them)."""
    keyed = []
    for i, t in enumerate(tools):
        name = raw_tool_name(wire, t)
        keyed.append((tool_order_key(name, _is_public_raw(wire, t, name, is_public)), i, t))
    ordered = [t for _, _, t in sorted(keyed, key=lambda k: (k[0], k[1]))]
    if wire != "anthropic" or ordered == list(tools):
        return ordered
    marks = [t["cache_control"] for t in tools if isinstance(t, Mapping) and "cache_control" in t]
    if not marks:
        return ordered
    ttl = "1h" if any(isinstance(m, Mapping) and m.get("ttl") == "1h" for m in marks) else None
    out = [{k: v for k, v in t.items() if k != "cache_control"} for t in ordered]
    marker = dict(marks[0]) if isinstance(marks[0], Mapping) else {"type": "ephemeral"}
    if ttl:
        marker["ttl"] = ttl
    out[-1]["cache_control"] = marker
    return out


def _is_public_raw(
    wire: str, tool: Mapping[str, JSON], name: str, is_public: IsPublicTool | None
) -> bool:
    return is_public is not None and is_public(name, raw_tool_digest(wire, tool))


def canonical_tool(
    wire: str, tool: Mapping[str, JSON], memo: SchemaMemo | None = None
) -> dict[str, JSON]:
    """One raw tool with its schema canonical; other keys keep their order and values."""
    canonical = canonical_schema if memo is None else memo.canonical
    out = dict(tool)
    key = raw_tool_schema_key(wire)
    if wire == "openai" and isinstance(tool.get("function"), Mapping):
        function = dict(tool["function"])
        if key in function:
            function[key] = canonical(function[key])
        out["function"] = function
    elif key in tool:
        out[key] = canonical(tool[key])
    return out
