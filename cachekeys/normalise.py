"""The normalisation switches and their application to the client's wire JSON.

Pure: takes a body and options, returns a new body that copies only the containers it edits,
so every byte Lantern did not mean to touch (signed thinking blocks, unknown fields) is
forwarded unchanged. The body is the one representation the rules edit; the typed request is
decoded from it (`gateway.core.prompt_view`). Each switch is a tenant policy choice; the gateway
maps its policy section onto `NormaliseOptions` (cachekeys never reads policies). History is
only touched by the opt-in `canonical_tool_args` (key order only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from adapters.types import JSON, WireFormat
from cachekeys.canonical import (
    IsPublicTool,
    SchemaMemo,
    canonical_arguments,
    canonical_tool,
    order_tools,
    sort_json,
)
from cachekeys.volatile import VolatileMatcher, relocate

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PublicPrefix:
    """What an admin declared shareable across tenants: tools by name or digest, system by digest."""

    tool_names: frozenset[str] = frozenset()
    tool_sha256: frozenset[str] = frozenset()  # hex of `canonical.tool_digest`
    system_sha256: frozenset[str] = frozenset()  # hex SHA-256 of one system text block (UTF-8)

    def is_public_tool(self, name: str, digest: bytes) -> bool:
        return name in self.tool_names or digest.hex() in self.tool_sha256

    @property
    def has_tools(self) -> bool:
        """Whether any tool is declared public (else no tool digest needs computing)."""
        return bool(self.tool_names or self.tool_sha256)

    def is_public_system(self, digest_hex: str) -> bool:
        return digest_hex in self.system_sha256


@dataclass(frozen=True, slots=True)
class NormaliseOptions:
    order_tools: bool = True
    canonical_json: bool = True
    canonical_tool_args: bool = False
    relocate_volatile: bool = False
    volatile: VolatileMatcher = field(default_factory=VolatileMatcher.build)
    public: PublicPrefix = PublicPrefix()
    schemas: SchemaMemo | None = None  # canonical schemas memoised (same result, less CPU)

    @property
    def is_public_tool(self) -> IsPublicTool | None:
        """None when no tool is declared public: ordering then needs no tool digests."""
        return self.public.is_public_tool if self.public.has_tools else None


def normalise(wire: WireFormat, body: Mapping[str, JSON], options: NormaliseOptions) -> Body:
    """Apply the enabled switches in a fixed order: schemas, tool order, history args, relocation."""
    out: Body = dict(body)
    tools = out.get("tools")
    if isinstance(tools, list) and tools:
        if options.canonical_json:
            memo = options.schemas
            tools = [canonical_tool(wire, t, memo) if isinstance(t, Mapping) else t for t in tools]
        if options.order_tools:
            tools = order_tools(wire, tools, options.is_public_tool)
        out["tools"] = tools
    if options.canonical_tool_args and isinstance(out.get("messages"), list):
        out["messages"] = [_canonical_args(wire, m) for m in out["messages"]]
    if options.relocate_volatile:
        out = relocate(wire, out, options.volatile)
    return out


def _canonical_args(wire: str, message: JSON) -> JSON:
    """Sorted keys in a message's tool-call arguments (opt-in: edits the bytes, not the meaning)."""
    if not isinstance(message, Mapping):
        return message
    if wire == "openai" and isinstance(message.get("tool_calls"), list):
        calls = [_openai_call_args(c) for c in message["tool_calls"]]
        return message if calls == message["tool_calls"] else {**message, "tool_calls": calls}
    content = message.get("content")
    if wire == "anthropic" and isinstance(content, list):
        parts = [_anthropic_call_args(p) for p in content]
        changed = any(a is not b for a, b in zip(parts, content, strict=True))
        return {**message, "content": parts} if changed else message
    return message


def _anthropic_call_args(part: JSON) -> JSON:
    """A `tool_use` block with its input's keys sorted; the block itself when they already are
    (so an unchanged message stays the client's own object and is not decoded again)."""
    if not (
        isinstance(part, Mapping)
        and part.get("type") == "tool_use"
        and isinstance(part.get("input"), Mapping)
    ):
        return part
    ordered = sort_json(part["input"])
    try:
        if orjson.dumps(ordered) == orjson.dumps(part["input"]):
            return part
    except TypeError:  # not plain JSON for orjson (a huge int): take the sorted copy
        pass
    return {**part, "input": ordered}


def _openai_call_args(call: JSON) -> JSON:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    return {
        **call,
        "function": {**function, "arguments": canonical_arguments(function["arguments"])},
    }
