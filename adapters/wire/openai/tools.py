"""OpenAI `tools` lists -> canonical `ToolSpec`s, and the memo of decoded lists an agent re-sends
on every call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from adapters.types import ToolSpec
from adapters.wire.json_fields import cache_control_at, depth_of, expect


def is_typed_tool(tool: Any) -> bool:
    """Whether a tool has a canonical form (custom and hosted tools have none: they are
    forwarded on the same wire only)."""
    return isinstance(tool, dict) and tool.get("type", "function") == "function"


def decode_tools(value: Any) -> tuple[ToolSpec, ...]:
    """The canonical tools of a `tools` list (custom and hosted tools skipped)."""
    tools = []
    for i, tool in enumerate(expect(value, list, "tools")):
        p = f"tools[{i}]"
        if not is_typed_tool(expect(tool, dict, p)):
            continue
        fn = expect(tool.get("function"), dict, f"{p}.function")
        tools.append(
            ToolSpec(
                name=expect(fn.get("name"), str, f"{p}.function.name"),
                description=expect(fn.get("description", ""), str, f"{p}.function.description"),
                input_schema=expect(fn.get("parameters", {}), dict, f"{p}.function.parameters"),
                cache_control=cache_control_at(tool, p),
            )
        )
    return tuple(tools)


# Kept: 12 tools decode in ~125-150 µs; the key and a hit take ~25-30 µs.
class ToolListMemo:
    """Decoded `tools` lists by their exact JSON bytes (bounded): an agent sends the same tools
    on every call, and decoding them was ~40 µs of the call's critical path against ~4 µs for
    the key. Entries are decoded from the key's own bytes, so they never share an object with a
    caller's body; the same list then yields the same (read-only) ToolSpec objects every call.
    `decode`: the wire's own (OpenAI's by default).

    It also knows each list's nesting depth (`depth`), so that the door's depth check need not
    walk the schemas again; the bytes `depth` serialised are reused by a `decode` of the same
    list object right after (one serialisation per call, not two)."""

    def __init__(
        self,
        max_entries: int = 1024,
        decode: Callable[[Any], tuple[ToolSpec, ...]] = decode_tools,
    ) -> None:
        # key -> [nesting depth, the decoded list]: each None until asked for
        self._entries: dict[bytes, list[Any]] = {}
        self._max_entries = max_entries
        self._decode = decode
        self._last: tuple[Any, bytes] | None = None  # the list `depth` just read, its bytes

    def decode(self, value: Any) -> tuple[ToolSpec, ...]:
        """`decode(value)`: equal bytes are equal JSON (1, 1.0 and true stay distinct)."""
        last = self._last
        if last is not None and last[0] is value:
            key = last[1]
            self._last = None
        else:
            try:
                key = orjson.dumps(value)
            except orjson.JSONEncodeError:  # past orjson's nesting limit (254): no memo
                return self._decode(value)
        entry = self._entries.get(key)
        found = None if entry is None else entry[1]
        if found is None:
            found = self._decode(orjson.loads(key))  # raises as the plain decode does; nothing kept
            if entry is None:
                entry = self._entry(key)
            entry[1] = found
        return found

    def depth(self, value: list[Any]) -> int:
        """`depth_of(value)` (1 for `[]`), by the list's JSON bytes."""
        try:
            key = orjson.dumps(value)
        except orjson.JSONEncodeError:  # past orjson's nesting limit (254): surely too deep
            self._last = None
            return depth_of(value)
        self._last = (value, key)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entry(key)
        depth: int | None = entry[0]
        if depth is None:
            depth = entry[0] = depth_of(value)
        return depth

    def _entry(self, key: bytes) -> list[Any]:
        if len(self._entries) >= self._max_entries:
            self._entries.clear()  # a bound, not an LRU: an agent's tool lists are few
        entry = self._entries[key] = [None, None]
        return entry

    def __len__(self) -> int:
        return len(self._entries)


def decode_tool_list(value: Any, memo: ToolListMemo | None) -> tuple[ToolSpec, ...]:
    return decode_tools(value) if memo is None else memo.decode(value)
