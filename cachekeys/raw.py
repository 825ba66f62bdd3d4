"""Normalisation over raw OpenAI / Anthropic request dicts, for bodies forwarded as-is.

Pure: returns a new dict and copies only the containers it edits, so every byte Lantern did
not mean to touch (signed thinking blocks, unknown fields) is forwarded unchanged. Applies the
same switches, in the same order, as `normalise.normalise_request` on canonical types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.types import JSON, WireFormat
from cachekeys.canonical import canonical_arguments, canonical_raw_tool, order_raw_tools, sort_json
from cachekeys.normalise import NormaliseOptions
from cachekeys.volatile import Relocator

Body = dict[str, Any]
SYSTEM_ROLES = ("system", "developer")


def normalise_raw(wire: WireFormat, body: Mapping[str, JSON], options: NormaliseOptions) -> Body:
    out: Body = dict(body)
    tools = out.get("tools")
    if isinstance(tools, list) and tools:
        if options.canonical_json:
            memo = options.schemas
            tools = [
                canonical_raw_tool(wire, t, memo) if isinstance(t, Mapping) else t for t in tools
            ]
        if options.order_tools:
            tools = order_raw_tools(wire, tools, options.is_public_tool)
        out["tools"] = tools
    if options.canonical_tool_args and isinstance(out.get("messages"), list):
        out["messages"] = [_canonical_args(wire, m) for m in out["messages"]]
    if options.relocate_volatile:
        out = _relocate(wire, out, Relocator(options.volatile))
    return out


def _canonical_args(wire: str, message: JSON) -> JSON:
    if not isinstance(message, Mapping):
        return message
    if wire == "openai" and isinstance(message.get("tool_calls"), list):
        calls = [_openai_call_args(c) for c in message["tool_calls"]]
        return message if calls == message["tool_calls"] else {**message, "tool_calls": calls}
    content = message.get("content")
    if wire == "anthropic" and isinstance(content, list):
        parts = [
            {**p, "input": sort_json(p["input"])}
            if isinstance(p, Mapping)
            and p.get("type") == "tool_use"
            and isinstance(p.get("input"), Mapping)
            else p
            for p in content
        ]
        return {**message, "content": parts}
    return message


def _openai_call_args(call: JSON) -> JSON:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    return {
        **call,
        "function": {**function, "arguments": canonical_arguments(function["arguments"])},
    }


# --- relocation ------------------------------------------------------------------------------


def _relocate(wire: str, body: Body, relocator: Relocator) -> Body:
    out = dict(body)
    if isinstance(out.get("tools"), list):
        out["tools"] = [_relocate_tool(wire, t, relocator) for t in out["tools"]]
    messages = list(out.get("messages") or [])
    if wire == "anthropic" and "system" in out:
        out["system"] = _relocate_content(out["system"], relocator)
    elif wire == "openai":
        for i, message in enumerate(messages):
            if not (isinstance(message, Mapping) and message.get("role") in SYSTEM_ROLES):
                break  # only the leading system turns; later ones are conversation history
            messages[i] = {
                **message,
                "content": _relocate_content(message.get("content"), relocator),
            }
    block = relocator.block_text()
    if block is None:
        return body
    out["messages"] = _append_block(messages, block)
    return out


def _relocate_tool(wire: str, tool: JSON, relocator: Relocator) -> JSON:
    if not isinstance(tool, Mapping):
        return tool
    if wire == "openai":
        function = tool.get("function")
        if not isinstance(function, Mapping):
            return tool
        return {**tool, "function": _relocate_fields(function, "parameters", relocator)}
    return _relocate_fields(tool, "input_schema", relocator)


def _relocate_fields(spec: Mapping[str, JSON], schema_key: str, relocator: Relocator) -> JSON:
    out = dict(spec)
    if isinstance(out.get("description"), str):
        out["description"] = relocator.text(out["description"])
    if schema_key in out:
        out[schema_key] = relocator.schema(out[schema_key])
    return out


def _relocate_content(content: JSON, relocator: Relocator) -> JSON:
    if isinstance(content, str):
        return relocator.text(content)
    if isinstance(content, list):
        return [
            {**p, "text": relocator.text(p["text"])}
            if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            else p
            for p in content
        ]
    return content


def _append_block(messages: list[JSON], block: str) -> list[JSON]:
    """Same placement as the canonical form (`volatile._append_block`)."""
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
    return message.get("role") if isinstance(message, Mapping) else None
