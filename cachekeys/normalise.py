"""The normalisation switches and their application to the client's wire JSON.

Pure: takes a body and options, returns a new body that copies only the containers it edits,
so every byte Lantern did not mean to touch (signed thinking blocks, unknown fields) is
forwarded unchanged. The body is the one representation the rules edit; the typed request is
decoded from it (`gateway.core.prompt_view`). Each switch is a tenant policy choice; the gateway
maps its policy section onto `NormaliseOptions` (cachekeys never reads policies); the defaults
here are the default policy's. History is only touched by `canonical_tool_args` (key order and
spacing of tool-call arguments: the same JSON value the model wrote).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import is_
from typing import Any

import orjson

from adapters.records import slot_init
from adapters.types import JSON, WireFormat
from cachekeys.canonical import (
    IsPublicTool,
    SchemaMemo,
    canonical_arguments,
    canonical_tool,
    order_tools,
    sort_json,
)
from cachekeys.relocation import relocate, tools_unmoved
from cachekeys.volatile import VolatileMatcher

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


class ArgumentsMemo:
    """`canonical_arguments` by the arguments text: an agent re-sends every earlier tool call on
    each turn, and parsing them all again would grow the request path's CPU with the history."""

    def __init__(self, max_entries: int = 8192, max_chars: int = 8_000_000) -> None:
        self._memo: dict[str, str] = {}
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars

    def canonical(self, arguments: str) -> str:
        found = self._memo.get(arguments)
        if found is None:
            found = canonical_arguments(arguments)
            if len(self._memo) >= self._max_entries or self._chars > self._max_chars:
                self._memo.clear()  # a bound, as the other memos
                self._chars = 0
            self._memo[arguments] = found
            self._chars += len(arguments) + len(found)
        return found


class ToolListsMemo:
    """A `tools` list as normalisation leaves it (schemas canonical, canonical order), by the
    list's JSON bytes, and whether relocation finds nothing in it: an agent sends the same tools
    on every call, and normalising them again was ~240 function calls a call. One per options
    object (its switches and matcher decide the result); the lists handed out are new, the tools
    in them shared read-only, as `SchemaMemo`'s schemas are."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 4_000_000) -> None:
        self._memo: dict[bytes, tuple[tuple[JSON, ...], bool]] = {}
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._num_bytes = 0

    def normalised(
        self, wire: WireFormat, tools: list[JSON], options: NormaliseOptions
    ) -> tuple[list[JSON], bool]:
        """(the tools normalised, True when relocation would move nothing out of them)."""
        try:
            key = orjson.dumps(tools)
        except TypeError:  # not plain JSON (a huge int, a non-str key): no memo
            return _normalised_tools(wire, tools, options), False
        found = self._memo.get(key)
        if found is None:
            out = _normalised_tools(wire, tools, options)
            clean = options.relocate_volatile and tools_unmoved(wire, out, options.volatile)
            found = (tuple(out), clean)
            if len(key) <= self._max_bytes:
                if (
                    len(self._memo) >= self._max_entries
                    or self._num_bytes + len(key) > self._max_bytes
                ):
                    self._memo.clear()  # a bound, as the other memos
                    self._num_bytes = 0
                self._memo[key] = found
                self._num_bytes += len(key)
        return list(found[0]), found[1]


def _normalised_tools(wire: WireFormat, tools: list[JSON], options: NormaliseOptions) -> list[JSON]:
    """Schemas canonical, then tools in canonical order, as the options say (the reference)."""
    if options.canonical_json:
        memo = options.schemas
        tools = [canonical_tool(wire, t, memo) if isinstance(t, Mapping) else t for t in tools]
    if options.order_tools:
        tools = order_tools(wire, tools, options.is_public_tool)
    return tools


@dataclass(frozen=True, slots=True)
class NormaliseOptions:
    order_tools: bool = True
    canonical_json: bool = True
    canonical_tool_args: bool = True
    relocate_volatile: bool = True
    # what is relocated: by default the values that change on every call (`per_call`)
    volatile: VolatileMatcher = field(default_factory=VolatileMatcher.per_call)
    public: PublicPrefix = PublicPrefix()
    schemas: SchemaMemo | None = None  # canonical schemas memoised (same result, less CPU)
    arguments: ArgumentsMemo = field(default_factory=ArgumentsMemo, compare=False)
    tool_lists: ToolListsMemo = field(default_factory=ToolListsMemo, compare=False)

    @property
    def is_public_tool(self) -> IsPublicTool | None:
        """None when no tool is declared public: ordering then needs no tool digests."""
        return self.public.is_public_tool if self.public.has_tools else None


@slot_init
@dataclass(frozen=True, slots=True)
class Edits:
    """What normalisation did to a call beyond tool order and schemas (for the reply's header)."""

    relocated: tuple[str, ...] = ()  # the kinds of values relocated, sorted
    num_tool_args: int = 0  # messages in the history whose tool-call arguments were re-serialised


def normalise(wire: WireFormat, body: Mapping[str, JSON], options: NormaliseOptions) -> Body:
    return normalise_edits(wire, body, options)[0]


def normalise_edits(
    wire: WireFormat, body: Mapping[str, JSON], options: NormaliseOptions
) -> tuple[Body, Edits]:
    """Apply the enabled switches in a fixed order: schemas, tool order, history args, relocation."""
    out: Body = dict(body)
    tools = out.get("tools")
    tools_clean = False  # relocation would move nothing out of the tools
    if isinstance(tools, list) and tools and (options.canonical_json or options.order_tools):
        out["tools"], tools_clean = options.tool_lists.normalised(wire, tools, options)
    num_args = 0
    messages = out.get("messages")
    if options.canonical_tool_args and isinstance(messages, list):
        # a message without a list of calls (OpenAI) or of blocks (Anthropic) is kept as it is,
        # here in line: most of a history, on every call
        lists = "tool_calls" if wire == "openai" else "content"
        edited = [
            m
            if type(m) is dict and not isinstance(m.get(lists), list)
            else _canonical_args(wire, m, options.arguments)
            for m in messages
        ]
        num_args = len(messages) - sum(map(is_, edited, messages))  # the messages replaced
        if num_args:
            out["messages"] = edited
    relocated: tuple[str, ...] = ()
    if options.relocate_volatile:
        out, relocated = relocate(wire, out, options.volatile, tools_clean)
    return out, Edits(relocated, num_args)


def _canonical_args(wire: str, message: JSON, memo: ArgumentsMemo) -> JSON:
    """Sorted keys in a message's tool-call arguments (edits the bytes, not the meaning); the
    message itself when they already are."""
    if not (isinstance(message, dict | Mapping)):
        return message
    if wire == "openai" and isinstance(message.get("tool_calls"), list):
        calls = [_openai_call_args(c, memo) for c in message["tool_calls"]]
        changed = not all(map(is_, calls, message["tool_calls"]))
        return {**message, "tool_calls": calls} if changed else message
    content = message.get("content")
    if wire == "anthropic" and isinstance(content, list):
        parts = [_anthropic_call_args(p) for p in content]
        changed = not all(map(is_, parts, content))
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
    if _is_sorted(part["input"]):
        return part
    return {**part, "input": sort_json(part["input"])}


def _is_sorted(value: JSON) -> bool:
    """Every object's keys already in sorted order (a walk, no copy: the usual case)."""
    if isinstance(value, Mapping):
        keys = list(value)
        return keys == sorted(keys) and all(_is_sorted(v) for v in value.values())
    if isinstance(value, list):
        return all(_is_sorted(v) for v in value)
    return True


def _openai_call_args(call: JSON, memo: ArgumentsMemo) -> JSON:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    arguments = function["arguments"]
    canonical = memo.canonical(arguments)
    if canonical == arguments:
        return call
    return {**call, "function": {**function, "arguments": canonical}}
