"""OpenAI Responses API request JSON -> canonical ChatRequest; the request half of the format.

Pure functions at the JSON edge; no I/O. Input items become canonical messages here, the reply
object and its stream are in `response.py` and `stream.py`. Every field the gateway cannot honour
is a WireFormatError naming it, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.errors import WireFormatError
from adapters.types import JSON, ChatRequest, TextPart, ToolSpec
from adapters.wire.json_fields import expect, optional
from adapters.wire.responses.items import items_to_messages, normalise_input

__all__ = ["ResponsesRequest", "check_response_id", "parse_request", "to_chat_request"]

# fields that are read and honoured (or echoed) by the gateway
_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "temperature",
        "top_p",
        "text",
        "previous_response_id",
        "store",
        "stream",
        "stream_options",
        "metadata",
        "parallel_tool_calls",
        "reasoning",
        "user",
        "prompt_cache_key",
        "safety_identifier",
        "include",
        "truncation",
        "service_tier",
    }
)
# `include` values that change nothing here: the gateway never holds encrypted reasoning
_HARMLESS_INCLUDES = frozenset({"reasoning.encrypted_content"})
# OpenAI's bounds on `metadata`: string values, so many pairs, keys and values this long
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
# a response id's length: far past any id an upstream or the gateway makes, short enough that
# the 404 naming an unknown id stays small
MAX_RESPONSE_ID_CHARS = 256


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """A checked Responses body: the input as items, and the fields the reply echoes."""

    model: str
    input_items: tuple[Mapping[str, JSON], ...]
    instructions: str | None
    tools: tuple[ToolSpec, ...]
    tool_choice: JSON
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    text_format: Mapping[str, JSON] | None  # `text.format` unless it is plain text
    previous_response_id: str | None
    store: bool
    stream: bool
    metadata: Mapping[str, JSON]
    parallel_tool_calls: bool
    reasoning_effort: str | None
    prompt_cache_key: str | None
    user: str | None


def parse_request(body: Mapping[str, Any]) -> ResponsesRequest:
    """Check a `/v1/responses` body; raises WireFormatError naming the first bad field."""
    expect(body, dict, "$")
    _reject_unsupported(body)
    if body.get("input") is None:
        raise WireFormatError("input", "required")
    instructions = optional(body, "instructions", str)
    return ResponsesRequest(
        model=expect(body.get("model"), str, "model"),
        input_items=normalise_input(body["input"]),
        instructions=instructions or None,
        tools=_tools(body.get("tools")),
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_output_tokens=optional(body, "max_output_tokens", int),
        temperature=optional(body, "temperature", (int, float)),
        top_p=optional(body, "top_p", (int, float)),
        text_format=_text_format(body.get("text")),
        previous_response_id=check_response_id(
            body.get("previous_response_id"), "previous_response_id"
        ),
        store=_flag(body, "store", default=True),
        stream=bool(optional(body, "stream", bool)),
        metadata=_metadata(body.get("metadata")),
        parallel_tool_calls=_flag(body, "parallel_tool_calls", default=True),
        reasoning_effort=_reasoning_effort(body.get("reasoning")),
        prompt_cache_key=optional(body, "prompt_cache_key", str),
        user=optional(body, "safety_identifier", str) or optional(body, "user", str),
    )


def check_response_id(value: Any, field: str) -> str | None:
    """A response id (`previous_response_id`, or the path's `response_id`), held to
    MAX_RESPONSE_ID_CHARS; raises WireFormatError naming `field`."""
    if value is None:
        return None
    if len(expect(value, str, field)) > MAX_RESPONSE_ID_CHARS:
        message = f"{len(value)} characters; at most {MAX_RESPONSE_ID_CHARS}"
        raise WireFormatError(field, message)
    return str(value)


def _flag(body: Mapping[str, Any], key: str, *, default: bool) -> bool:
    value = optional(body, key, bool)
    return default if value is None else bool(value)


def _reject_unsupported(body: Mapping[str, Any]) -> None:
    for key in body:
        if key not in _KNOWN and body[key] is not None:
            raise WireFormatError(key, "parameter not supported by this gateway")
    if body.get("background"):
        raise WireFormatError("background", "background responses are not supported")
    if body.get("truncation") not in (None, "disabled"):
        raise WireFormatError("truncation", "only 'disabled' is supported")
    for i, value in enumerate(optional(body, "include", list) or ()):
        if expect(value, str, f"include[{i}]") not in _HARMLESS_INCLUDES:
            raise WireFormatError(f"include[{i}]", f"{value!r} is not supported")
    if body.get("stream_options") is not None:
        expect(body["stream_options"], dict, "stream_options")


def _tools(value: Any) -> tuple[ToolSpec, ...]:
    if value is None:
        return ()
    tools = []
    for i, tool in enumerate(expect(value, list, "tools")):
        path = f"tools[{i}]"
        kind = expect(tool, dict, path).get("type")
        if kind != "function":
            raise WireFormatError(f"{path}.type", f"tool type {kind!r} is not supported")
        tools.append(
            ToolSpec(
                name=expect(tool.get("name"), str, f"{path}.name"),
                description=expect(tool.get("description") or "", str, f"{path}.description"),
                input_schema=expect(tool.get("parameters") or {}, dict, f"{path}.parameters"),
            )
        )
    return tuple(tools)


def _tool_choice(value: Any) -> JSON:
    """Canonical: None | "auto" | "none" | "required" | {"name": <tool>}."""
    if value is None or value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        return {"name": expect(value.get("name"), str, "tool_choice.name")}
    raise WireFormatError("tool_choice", "expected 'auto', 'none', 'required' or a function")


def _text_format(value: Any) -> Mapping[str, JSON] | None:
    if value is None:
        return None
    fmt = expect(value, dict, "text").get("format")
    if fmt is None or expect(fmt, dict, "text.format").get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return fmt
    if fmt.get("type") != "json_schema":
        raise WireFormatError("text.format.type", f"{fmt.get('type')!r} is not supported")
    expect(fmt.get("name"), str, "text.format.name")
    expect(fmt.get("schema"), dict, "text.format.schema")
    return fmt


def _metadata(value: Any) -> Mapping[str, JSON]:
    """Echoed in the reply and stored with it: held to what OpenAI's document allows."""
    if value is None:
        return {}
    pairs = expect(value, dict, "metadata")
    if len(pairs) > MAX_METADATA_PAIRS:
        raise WireFormatError("metadata", f"{len(pairs)} pairs; at most {MAX_METADATA_PAIRS}")
    for key, text in pairs.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise WireFormatError("metadata", f"a key is over {MAX_METADATA_KEY_CHARS} characters")
        if len(expect(text, str, f"metadata.{key}")) > MAX_METADATA_VALUE_CHARS:
            message = f"over {MAX_METADATA_VALUE_CHARS} characters"
            raise WireFormatError(f"metadata.{key}", message)
    return pairs


def _reasoning_effort(value: Any) -> str | None:
    if value is None:
        return None
    effort = expect(value, dict, "reasoning").get("effort")
    return None if effort is None else expect(effort, str, "reasoning.effort")


def to_chat_request(
    req: ResponsesRequest, history: Sequence[Mapping[str, JSON]] = ()
) -> ChatRequest:
    """The canonical request: `history` (a stored conversation's items) before this input."""
    messages = items_to_messages((*history, *req.input_items))
    system: list[TextPart] = [TextPart(req.instructions)] if req.instructions else []
    rest = list(messages)
    while rest and rest[0].role == "system":
        system.extend(p for p in rest.pop(0).content if isinstance(p, TextPart))
    if not rest:
        raise WireFormatError("input", "must hold at least one message or item")
    return ChatRequest(
        model=req.model,
        messages=tuple(rest),
        system=tuple(system),
        tools=req.tools,
        tool_choice=req.tool_choice,
        max_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        stream=req.stream,
        prompt_cache_key=req.prompt_cache_key,
        user=req.user,
        extra=_extra(req),
    )


def _extra(req: ResponsesRequest) -> dict[str, JSON]:
    """Chat-completions fields that carry the Responses options a backend may honour."""
    extra: dict[str, JSON] = {}
    if req.text_format is not None and req.text_format["type"] == "json_object":
        extra["response_format"] = {"type": "json_object"}
    elif req.text_format is not None:
        fmt = req.text_format
        schema = {"name": fmt["name"], "schema": fmt["schema"]}
        if "strict" in fmt:
            schema["strict"] = fmt["strict"]
        extra["response_format"] = {"type": "json_schema", "json_schema": schema}
    if req.reasoning_effort is not None:
        extra["reasoning_effort"] = req.reasoning_effort
    if not req.parallel_tool_calls and req.tools:
        extra["parallel_tool_calls"] = False
    return extra
