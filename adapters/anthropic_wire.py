"""Anthropic Messages JSON <-> canonical types (requests, responses, usage, errors).

Pure functions at the JSON edge; no I/O. Streaming lives in `anthropic_wire_stream.py`.
Block types the canonical model cannot hold (thinking, documents, server tools) are skipped when
decoding; they survive only on the same-wire path, where the client's raw JSON is forwarded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from adapters.errors import WireFormatError
from adapters.openai_wire import _cache_control, _expect, _optional
from adapters.types import (
    JSON,
    CacheControl,
    ChatRequest,
    ChatResponse,
    ContentPart,
    ImagePart,
    Message,
    StopReason,
    TextPart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
    Usage,
)

DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; used when the canonical call has none
ANTHROPIC_EXTRA_FIELDS = frozenset({
    "top_k", "thinking", "service_tier", "container", "mcp_servers", "context_management",
})
_KNOWN = frozenset({
    "model", "messages", "system", "tools", "tool_choice", "max_tokens", "temperature",
    "top_p", "stop_sequences", "stream", "metadata",
})
_SKIPPED_BLOCKS = frozenset({
    "thinking", "redacted_thinking", "document", "search_result", "server_tool_use",
    "web_search_tool_result", "container_upload",
})
STOP_FROM_WIRE: dict[str, StopReason] = {
    "end_turn": "stop", "max_tokens": "length", "tool_use": "tool_use",
    "stop_sequence": "stop_sequence", "refusal": "error", "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}
STOP_TO_WIRE: dict[StopReason, str] = {
    "stop": "end_turn", "length": "max_tokens", "tool_use": "tool_use",
    "stop_sequence": "stop_sequence", "error": "refusal",
}


def _image(block: Mapping[str, Any], path: str) -> ImagePart:
    source = _expect(block.get("source"), dict, f"{path}.source")
    cc = _cache_control(block, path)
    if source.get("type") == "url":
        return ImagePart(url=_expect(source.get("url"), str, f"{path}.source.url"),
                         cache_control=cc)
    return ImagePart(
        media_type=_expect(source.get("media_type"), str, f"{path}.source.media_type"),
        data_b64=_expect(source.get("data"), str, f"{path}.source.data"), cache_control=cc)


def _simple_blocks(value: Any, path: str) -> tuple[TextPart | ImagePart, ...]:
    """Text and image blocks (system, tool_result content)."""
    if isinstance(value, str):
        return (TextPart(value),) if value else ()
    parts: list[TextPart | ImagePart] = []
    for i, block in enumerate(_expect(value, list, path)):
        p = f"{path}[{i}]"
        kind = _expect(block, dict, p).get("type")
        if kind == "text":
            parts.append(TextPart(_expect(block.get("text"), str, f"{p}.text"),
                                  _cache_control(block, p)))
        elif kind == "image":
            parts.append(_image(block, p))
        elif kind not in _SKIPPED_BLOCKS:
            raise WireFormatError(f"{p}.type", f"unsupported block type {kind!r}")
    return tuple(parts)


def _block(block: Any, path: str) -> ContentPart | None:
    kind = _expect(block, dict, path).get("type")
    if kind == "text":
        return TextPart(_expect(block.get("text"), str, f"{path}.text"),
                        _cache_control(block, path))
    if kind == "image":
        return _image(block, path)
    if kind == "tool_use":
        arguments = _expect(block.get("input", {}), dict, f"{path}.input")
        return ToolUsePart(
            id=_expect(block.get("id"), str, f"{path}.id"),
            name=_expect(block.get("name"), str, f"{path}.name"),
            arguments_json=orjson.dumps(arguments).decode(),
            cache_control=_cache_control(block, path))
    if kind == "tool_result":
        return ToolResultPart(
            tool_use_id=_expect(block.get("tool_use_id"), str, f"{path}.tool_use_id"),
            content=_simple_blocks(block.get("content", ""), f"{path}.content"),
            is_error=bool(block.get("is_error", False)),
            cache_control=_cache_control(block, path))
    if kind in _SKIPPED_BLOCKS:
        return None
    raise WireFormatError(f"{path}.type", f"unsupported block type {kind!r}")


def _message(msg: Any, path: str) -> Message:
    role = _expect(msg, dict, path).get("role")
    if role not in ("user", "assistant"):
        raise WireFormatError(f"{path}.role", "expected 'user' or 'assistant'")
    content = msg.get("content")
    if isinstance(content, str):
        return Message(role, (TextPart(content),) if content else ())
    blocks = _expect(content, list, f"{path}.content")
    parts = (_block(b, f"{path}.content[{i}]") for i, b in enumerate(blocks))
    return Message(role, tuple(p for p in parts if p is not None))


def _tools(value: Any) -> tuple[ToolSpec, ...]:
    tools = []
    for i, tool in enumerate(_expect(value, list, "tools")):
        p = f"tools[{i}]"
        if "input_schema" not in _expect(tool, dict, p):
            continue  # a server tool (web search, code execution): same-wire passthrough only
        tools.append(ToolSpec(
            name=_expect(tool.get("name"), str, f"{p}.name"),
            description=_expect(tool.get("description", ""), str, f"{p}.description"),
            input_schema=_expect(tool["input_schema"], dict, f"{p}.input_schema"),
            cache_control=_cache_control(tool, p)))
    return tuple(tools)


def _tool_choice(value: Any) -> JSON:
    if value is None:
        return None
    kind = _expect(value, dict, "tool_choice").get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"name": _expect(value.get("name"), str, "tool_choice.name")}
    raise WireFormatError("tool_choice.type", "expected 'auto', 'any', 'tool' or 'none'")


def decode_request(body: Mapping[str, Any]) -> ChatRequest:
    """Canonical form of an Anthropic `/v1/messages` body; raises WireFormatError(path)."""
    _expect(body, dict, "$")
    raw = _expect(body.get("messages"), list, "messages")
    metadata = _optional(body, "metadata", dict) or {}
    user = metadata.get("user_id")
    stop = _optional(body, "stop_sequences", list) or []
    return ChatRequest(
        model=_expect(body.get("model"), str, "model"),
        messages=tuple(_message(m, f"messages[{i}]") for i, m in enumerate(raw)),
        system=tuple(p for p in _simple_blocks(body.get("system") or "", "system")
                     if isinstance(p, TextPart)),
        tools=_tools(body["tools"]) if body.get("tools") else (),
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_tokens=_optional(body, "max_tokens", int),
        temperature=_optional(body, "temperature", (int, float)),
        top_p=_optional(body, "top_p", (int, float)),
        stop=tuple(_expect(s, str, f"stop_sequences[{i}]") for i, s in enumerate(stop)),
        stream=bool(_optional(body, "stream", bool)),
        user=_expect(user, str, "metadata.user_id") if user is not None else None,
        extra={k: v for k, v in body.items() if k not in _KNOWN},
    )


# --- encoding -------------------------------------------------------------------------------


def _cc(out: dict[str, Any], cc: CacheControl | None) -> dict[str, Any]:
    if cc is not None:
        out["cache_control"] = {"type": "ephemeral"} if cc.ttl == "5m" else {
            "type": "ephemeral", "ttl": cc.ttl}
    return out


def _encode_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return _cc({"type": "text", "text": part.text}, part.cache_control)
    if isinstance(part, ImagePart):
        source = ({"type": "url", "url": part.url} if part.url is not None else
                  {"type": "base64", "media_type": part.media_type, "data": part.data_b64})
        return _cc({"type": "image", "source": source}, part.cache_control)
    if isinstance(part, ToolUsePart):
        return _cc({"type": "tool_use", "id": part.id, "name": part.name,
                    "input": orjson.loads(part.arguments_json or "{}")}, part.cache_control)
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.tool_use_id,
                           "content": [_encode_part(p) for p in part.content]}
    if part.is_error:
        out["is_error"] = True
    return _cc(out, part.cache_control)


def _encode_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """OpenAI-origin `tool` and mid-conversation `system` messages become user turns; adjacent
    user turns merge, because Anthropic wants all results of one tool round in one message."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = [_encode_part(p) for p in msg.content]
        if out and out[-1]["role"] == role == "user" and msg.role in ("tool", "system"):
            out[-1]["content"].extend(blocks)
        elif out and out[-1]["role"] == role == "user" and _is_tool_turn(out[-1]):
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _is_tool_turn(msg: dict[str, Any]) -> bool:
    return any(b.get("type") == "tool_result" for b in msg["content"])


def _encode_tool_choice(choice: JSON) -> JSON:
    if choice is None:
        return None
    if isinstance(choice, dict):
        return {"type": "tool", "name": choice["name"]}
    return {"type": {"required": "any"}.get(choice, choice)}


def encode_request(req: ChatRequest) -> dict[str, Any]:
    """Anthropic body for a canonical request (used when the client spoke OpenAI)."""
    body: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_tokens if req.max_tokens is not None else DEFAULT_MAX_TOKENS,
        "messages": _encode_messages(req.messages),
    }
    if req.system:
        body["system"] = [_encode_part(p) for p in req.system]
    if req.tools:
        body["tools"] = [_cc({"name": t.name, "description": t.description,
                              "input_schema": dict(t.input_schema)}, t.cache_control)
                         for t in req.tools]
    optional = {
        "tool_choice": _encode_tool_choice(req.tool_choice) if req.tools else None,
        "temperature": req.temperature, "top_p": req.top_p,
        "stop_sequences": list(req.stop) or None,
        "metadata": {"user_id": req.user} if req.user is not None else None,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    if req.stream:
        body["stream"] = True
    body.update((k, v) for k, v in req.extra.items() if k in ANTHROPIC_EXTRA_FIELDS)
    return body


# --- responses ------------------------------------------------------------------------------


def decode_usage(usage: Mapping[str, Any] | None) -> Usage:
    if not usage:
        return Usage()
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
    )


def encode_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
    }


def decode_response(body: Mapping[str, Any]) -> ChatResponse:
    blocks = _expect(body.get("content"), list, "content")
    content: list[TextPart | ToolUsePart] = []
    for i, block in enumerate(blocks):
        part = _block(block, f"content[{i}]")
        if isinstance(part, TextPart | ToolUsePart):
            content.append(part)
    return ChatResponse(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=tuple(content),
        stop_reason=STOP_FROM_WIRE.get(body.get("stop_reason") or "end_turn", "stop"),
        usage=decode_usage(body.get("usage")),
        stop_sequence=body.get("stop_sequence"),
    )


def encode_response(resp: ChatResponse) -> dict[str, Any]:
    return {
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": [_encode_part(p) for p in resp.content],
        "stop_reason": STOP_TO_WIRE[resp.stop_reason],
        "stop_sequence": resp.stop_sequence,
        "usage": encode_usage(resp.usage),
    }


def encode_error(message: str, type_: str) -> bytes:
    """The error body Anthropic clients parse: {"type":"error","error":{"type","message"}}."""
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})
