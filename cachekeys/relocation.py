"""Volatile relocation over a wire body: values out of tools and system, into one text block on
the newest user turn.

Pure: returns a new body that copies only the containers it edits (an untouched tool or system
block is the client's own object). Conversation history is never rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping

from adapters.types import JSON
from cachekeys.volatile import Relocator, VolatileMatcher

SYSTEM_ROLES = ("system", "developer")


def relocate(
    wire: str, body: Mapping[str, JSON], matcher: VolatileMatcher, tools_unmoved: bool = False
) -> tuple[dict[str, JSON], tuple[str, ...]]:
    """Move volatile values out of tools and system into a block on the newest user turn
    (OpenAI: only the leading system turns are system; later ones are conversation history).
    Returns the body (a copy of `body` when nothing moved) and the kinds of values moved.
    `tools_unmoved`: the caller knows `tools_unmoved` holds for the body's tools (not walked)."""
    relocator = Relocator(matcher)
    out = dict(body)
    tools = out.get("tools")
    if isinstance(tools, list) and not tools_unmoved:
        moved = [_relocate_tool(wire, t, relocator) for t in tools]
        if any(a is not b for a, b in zip(moved, tools, strict=True)):
            out["tools"] = moved
    messages = list(out.get("messages") or [])
    if wire == "anthropic" and "system" in out:
        out["system"] = _relocate_content(out["system"], relocator)
    elif wire == "openai":
        for i, message in enumerate(messages):
            if not (_is_map(message) and message.get("role") in SYSTEM_ROLES):
                break
            content = message.get("content")
            moved_content = _relocate_content(content, relocator)
            if moved_content is not content:
                messages[i] = {**message, "content": moved_content}
    block = relocator.block_text()
    if block is None:
        return dict(body), ()
    out["messages"] = _append_block(messages, block)
    return out, tuple(sorted(relocator.kinds))


def tools_unmoved(wire: str, tools: list[JSON], matcher: VolatileMatcher) -> bool:
    """Whether relocation leaves every tool as it is (no volatile value in any)."""
    relocator = Relocator(matcher)
    return all(_relocate_tool(wire, t, relocator) is t for t in tools)


def _relocate_tool(wire: str, tool: JSON, relocator: Relocator) -> JSON:
    if not _is_map(tool):
        return tool
    if wire == "openai":
        function = tool.get("function")
        if not _is_map(function):
            return tool
        moved = _relocate_fields(function, "parameters", relocator)
        return tool if moved is function else {**tool, "function": moved}
    return _relocate_fields(tool, "input_schema", relocator)


def _relocate_fields(spec: Mapping[str, JSON], schema_key: str, relocator: Relocator) -> JSON:
    description = spec.get("description")
    schema = spec.get(schema_key)
    if relocator.is_clean_tool(schema, description):
        return spec
    new_description = relocator.text(description) if isinstance(description, str) else description
    new_schema = relocator.schema(schema) if schema_key in spec else schema
    if new_description is description and new_schema is schema:
        relocator.mark_clean_tool(schema, description)
        return spec
    out = dict(spec)
    if isinstance(description, str):
        out["description"] = new_description
    if schema_key in spec:
        out[schema_key] = new_schema
    return out


def _relocate_content(content: JSON, relocator: Relocator) -> JSON:
    if isinstance(content, str):
        return relocator.text(content)
    if isinstance(content, list):
        parts = [
            {**p, "text": moved}
            if _is_map(p)
            and p.get("type") == "text"
            and isinstance(p.get("text"), str)
            and (moved := relocator.text(p["text"])) is not p["text"]
            else p
            for p in content
        ]
        return content if all(a is b for a, b in zip(parts, content, strict=True)) else parts
    return content


def _append_block(messages: list[JSON], block: str) -> list[JSON]:
    """The newest turn if it is the user's; the user turn before an assistant prefill; else a
    new user turn at the end (after a tool answer or a system note)."""
    part = {"type": "text", "text": block}
    target = len(messages) - 1
    if messages and _role(messages[-1]) == "assistant" and len(messages) > 1:
        target -= 1
    if target < 0 or _role(messages[target]) != "user":
        return [*messages, {"role": "user", "content": [part]}]
    message = messages[target]
    content = message.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return [*messages[:target], {**message, "content": [*parts, part]}, *messages[target + 1 :]]


def _role(message: JSON) -> str | None:
    return message.get("role") if _is_map(message) else None


def _is_map(value: object) -> bool:
    """`isinstance(value, Mapping)`, the plain dict of parsed JSON checked first: the ABC check
    costs ~0.3 µs, paid per tool on every call."""
    return isinstance(value, dict | Mapping)
