"""Provider-side cache isolation: a short tenant-keyed line at the head of a prompt's private part.

A provider's prompt cache is shared by every call made with one set of credentials: two tenants
behind one key sending byte-identical prefixes would read each other's entries (a timing side
channel). The line makes the prefix bytes differ per tenant from the first block that is not
declared public on: into the description of the first non-public tool, else as a system block
right after the leading public system blocks. Declared-public tools and system blocks before it
stay byte-identical across tenants, so their entries are still shared. No I/O; the lines are
memoised by salt (bounded).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from adapters.types import JSON, WireFormat
from cachekeys.canonical import raw_tool_digest, raw_tool_name
from cachekeys.layout import system_digest_hex
from cachekeys.normalise import PublicPrefix

SCOPE_TAG_HEX = 16  # 64 bits of a keyed hash: never equal for two tenants by chance


MAX_MEMO = 10_000  # salts (one per tenant) whose line is kept; past that the memo starts over
_lines: dict[str, str] = {}


def scope_line(salt: str) -> str:
    """The line for the tenant whose cache salt is `salt` (an HMAC of the server secret and the
    tenant id): a hash of it, so the salt itself never reaches a provider. Memoised by salt (a
    call of an isolated tenant asks for it twice)."""
    line = _lines.get(salt)
    if line is None:
        tag = hashlib.sha256(b"lantern-provider-scope\0" + salt.encode()).hexdigest()
        line = f"[cache scope {tag[:SCOPE_TAG_HEX]}]\n"
        if len(_lines) >= MAX_MEMO:
            _lines.clear()
        _lines[salt] = line
    return line


def isolate(
    wire: WireFormat, body: Mapping[str, JSON], line: str, public: PublicPrefix
) -> dict[str, JSON]:
    """The client's JSON with `line` at the head of its private part."""
    out = dict(body)
    tools = list(_as_list(out.get("tools")))
    for i, tool in enumerate(tools):
        if not _is_public_raw_tool(public, wire, tool):
            tools[i] = _tag_raw_tool(wire, tool, line)
            out["tools"] = tools
            return out
    if wire == "anthropic":
        out["system"] = _anthropic_system(out.get("system"), line, public)
    else:
        out["messages"] = _openai_messages(_as_list(out.get("messages")), line, public)
    return out


def isolate_responses(body: Mapping[str, JSON], line: str, public: PublicPrefix) -> dict[str, JSON]:
    """A Responses API body with `line` at the head of its private part, where `isolate` puts it
    in the chat body the same call becomes: the first tool not declared public (Responses tools
    are flat: name, description, parameters at the top), else before private `instructions`,
    else a system message after the leading public system messages of `input`."""
    out = dict(body)
    tools = list(_as_list(out.get("tools")))
    for i, tool in enumerate(tools):
        if not _is_public_flat_tool(public, tool):
            tools[i] = _tag_raw_tool("anthropic", tool, line)  # flat, as Anthropic's
            out["tools"] = tools
            return out
    instructions = out.get("instructions")
    if isinstance(instructions, str) and instructions and not _is_public_text(public, instructions):
        out["instructions"] = line + instructions
        return out
    given = out.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else _as_list(given)
    out["input"] = _openai_messages(items, line, public)
    return out


def _is_public_text(public: PublicPrefix, text: str) -> bool:
    return public.is_public_system(system_digest_hex(text))


def _is_public_flat_tool(public: PublicPrefix, tool: Any) -> bool:
    if not public.has_tools or not isinstance(tool, Mapping):
        return False
    flat = {  # as the door reads it (adapters/wire/responses/request.py `_tools`)
        "name": tool.get("name", ""),
        "description": tool.get("description") or "",
        "input_schema": tool.get("parameters") or {},
    }
    return public.is_public_tool(str(flat["name"]), raw_tool_digest("anthropic", flat))


def _is_public_raw_tool(public: PublicPrefix, wire: WireFormat, tool: Any) -> bool:
    if not public.has_tools or not isinstance(tool, Mapping):
        return False
    return public.is_public_tool(raw_tool_name(wire, tool), raw_tool_digest(wire, tool))


def _tag_raw_tool(wire: WireFormat, tool: Any, line: str) -> JSON:
    if not isinstance(tool, Mapping):
        return tool  # type: ignore[no-any-return]
    function = tool.get("function") if wire == "openai" else None
    if isinstance(function, Mapping):
        described = {**function, "description": line + str(function.get("description") or "")}
        return {**tool, "function": described}
    return {**tool, "description": line + str(tool.get("description") or "")}


def _leading_public(public: PublicPrefix, texts: list[str]) -> int:
    at = 0
    while at < len(texts) and public.is_public_system(system_digest_hex(texts[at])):
        at += 1
    return at


def _anthropic_system(system: JSON, line: str, public: PublicPrefix) -> JSON:
    parts: list[Any] = (
        [{"type": "text", "text": system}] if isinstance(system, str) else _as_list(system)
    )
    texts = [str(p.get("text", "")) if isinstance(p, Mapping) else "" for p in parts]
    at = _leading_public(public, texts)
    return [*parts[:at], {"type": "text", "text": line}, *parts[at:]]


def _openai_messages(messages: list[Any], line: str, public: PublicPrefix) -> list[Any]:
    """A system message with the line after the leading system messages that are public."""
    at = 0
    while at < len(messages) and _is_public_system_message(public, messages[at]):
        at += 1
    return [*messages[:at], {"role": "system", "content": line}, *messages[at:]]


def _is_public_system_message(public: PublicPrefix, message: Any) -> bool:
    if not isinstance(message, Mapping) or message.get("role") not in ("system", "developer"):
        return False
    content = message.get("content")
    parts = [content] if isinstance(content, str) else _as_list(content)
    texts = [p if isinstance(p, str) else str(p.get("text", "")) for p in parts]
    return bool(texts) and _leading_public(public, texts) == len(texts)


def _as_list(value: JSON) -> list[Any]:
    return list(value) if isinstance(value, list) else []
