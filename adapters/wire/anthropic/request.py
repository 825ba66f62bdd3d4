"""Anthropic Messages request JSON <-> canonical ChatRequest.

Pure functions at the JSON edge; no I/O. Blocks live in `blocks.py`, responses in `response.py`,
streaming in `stream.py`; the package's `__init__` is the one import for the format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.errors import WireFormatError
from adapters.types import JSON, ChatRequest, Message, TextPart, ToolSpec
from adapters.wire.anthropic.blocks import decode_block, decode_simple_blocks, encode_block
from adapters.wire.json_fields import (
    cache_control_at,
    expect,
    json_schema_of,
    optional,
    with_cache_control,
)

if TYPE_CHECKING:
    from adapters.wire.openai.tools import ToolListMemo

__all__ = [
    "ANTHROPIC_EXTRA_FIELDS",
    "DEFAULT_MAX_TOKENS",
    "decode_message",
    "decode_request",
    "decode_system",
    "decode_tools",
    "encode_request",
    "is_typed_tool",
    "output_schema_of",
]


DEFAULT_MAX_TOKENS = 4096  # Anthropic requires max_tokens; used when the canonical call has none


ANTHROPIC_EXTRA_FIELDS = frozenset(
    {
        "top_k",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
    }
)


_KNOWN = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "metadata",
    }
)


def _message(msg: Any, path: str) -> Message:
    role = expect(msg, dict, path).get("role")
    if role not in ("user", "assistant"):
        raise WireFormatError(f"{path}.role", "expected 'user' or 'assistant'")
    content = msg.get("content")
    if content is None:
        raise WireFormatError(f"{path}.content", "required")
    if isinstance(content, str):
        return Message(role, (TextPart(content),) if content else ())
    blocks = expect(content, list, f"{path}.content")
    parts = (decode_block(b, f"{path}.content[{i}]") for i, b in enumerate(blocks))
    return Message(role, tuple(p for p in parts if p is not None))


def is_typed_tool(tool: Any) -> bool:
    """Whether a tool has a canonical form (a server tool, web search or code execution, has
    none: it is forwarded on the same wire only)."""
    return isinstance(tool, dict) and "input_schema" in tool


def decode_tools(value: Any) -> tuple[ToolSpec, ...]:
    """The canonical tools of a `tools` list (server tools skipped)."""
    return _tools(value)


def decode_message(msg: Any, path: str) -> Message:
    return _message(msg, path)


def decode_system(value: Any) -> tuple[TextPart, ...]:
    """The text blocks of a `system` value (a string or a list of blocks)."""
    return tuple(p for p in decode_simple_blocks(value or "", "system") if isinstance(p, TextPart))


def _tools(value: Any) -> tuple[ToolSpec, ...]:
    tools = []
    for i, tool in enumerate(expect(value, list, "tools")):
        p = f"tools[{i}]"
        if not is_typed_tool(expect(tool, dict, p)):
            continue
        tools.append(
            ToolSpec(
                name=expect(tool.get("name"), str, f"{p}.name"),
                description=expect(tool.get("description", ""), str, f"{p}.description"),
                input_schema=expect(tool["input_schema"], dict, f"{p}.input_schema"),
                cache_control=cache_control_at(tool, p),
            )
        )
    return tuple(tools)


def _tool_choice(value: Any) -> JSON:
    if value is None:
        return None
    kind = expect(value, dict, "tool_choice").get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"name": expect(value.get("name"), str, "tool_choice.name")}
    raise WireFormatError("tool_choice.type", "expected 'auto', 'any', 'tool' or 'none'")


def _extra(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields without a canonical slot; `tool_choice.disable_parallel_tool_use` as OpenAI's
    `parallel_tool_calls: false`, which an OpenAI-style upstream takes."""
    extra = {k: v for k, v in body.items() if k not in _KNOWN}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True:
        extra["parallel_tool_calls"] = False
    schema = output_schema_of(body.get("output_config"), body.get("output_format"))
    if schema is not None:
        extra["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        }
    return extra


def output_schema_of(output_config: Any, output_format: Any = None) -> dict[str, Any] | None:
    """The JSON schema of Anthropic's structured outputs, `output_config: {"format": F}` (or
    the beta's `output_format: F`) with F `{"type": "json_schema", "schema": {...}}` and
    nothing else asked; None otherwise."""
    if isinstance(output_config, dict) and set(output_config) == {"format"}:
        output_format = output_config["format"]
    elif output_config is not None:
        return None
    if not isinstance(output_format, dict) or output_format.get("type") != "json_schema":
        return None
    schema = output_format.get("schema")
    return schema if isinstance(schema, dict) and set(output_format) <= {"type", "schema"} else None


def decode_request(
    body: Mapping[str, Any],
    *,
    require_max_tokens: bool = True,
    tool_lists: ToolListMemo | None = None,
) -> ChatRequest:
    """Canonical form of an Anthropic `/v1/messages` body; raises WireFormatError(path).
    `require_max_tokens=False` for `/v1/messages/count_tokens`, which takes none. With
    `tool_lists` (made with `decode_tools`), the tools come from that memo (equal values,
    shared objects)."""
    expect(body, dict, "$")
    raw = expect(body.get("messages"), list, "messages")
    metadata = optional(body, "metadata", dict) or {}
    user = metadata.get("user_id")
    stop = optional(body, "stop_sequences", list) or []
    top_k = optional(body, "top_k", int)
    if isinstance(top_k, bool) or (top_k is not None and top_k < 0):
        raise WireFormatError("top_k", "expected an integer >= 0")
    request = ChatRequest(
        model=expect(body.get("model"), str, "model"),
        messages=tuple(_message(m, f"messages[{i}]") for i, m in enumerate(raw)),
        system=decode_system(body.get("system")),
        tools=(
            (_tools(body["tools"]) if tool_lists is None else tool_lists.decode(body["tools"]))
            if body.get("tools")
            else ()
        ),
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_tokens=optional(body, "max_tokens", int),
        temperature=optional(body, "temperature", (int, float)),
        top_p=optional(body, "top_p", (int, float)),
        stop=tuple(expect(s, str, f"stop_sequences[{i}]") for i, s in enumerate(stop)),
        stream=bool(optional(body, "stream", bool)),
        user=expect(user, str, "metadata.user_id") if user is not None else None,
        extra=_extra(body),
    )
    if not raw:  # checked last, so that every other field's error is named first
        raise WireFormatError("messages", "must hold at least one message")
    if require_max_tokens and "max_tokens" not in body:  # as Anthropic's API: a 400
        raise WireFormatError("max_tokens", "required")
    return request


# --- encoding ------------------------------------------------------------------------------------


def _encode_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """OpenAI-origin `tool` and mid-conversation `system` messages become user turns; adjacent
    user turns merge, because Anthropic wants all results of one tool round in one message."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = [encode_block(p) for p in msg.content]
        if (
            out
            and out[-1]["role"] == role == "user"
            and msg.role in ("tool", "system")
            or out
            and out[-1]["role"] == role == "user"
            and _is_tool_turn(out[-1])
        ):
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _is_tool_turn(msg: dict[str, Any]) -> bool:
    return any(b.get("type") == "tool_result" for b in msg["content"])


def _encode_tool_choice(choice: JSON, parallel: bool) -> JSON:
    """`parallel` False (OpenAI's `parallel_tool_calls: false`): at most one tool call, as
    `disable_parallel_tool_use` (which `none` does not take: it calls no tool at all)."""
    if choice is None and parallel:
        return None
    if isinstance(choice, dict):
        out: dict[str, Any] = {"type": "tool", "name": choice["name"]}
    else:
        kind = choice or "auto"
        out = {"type": "any" if kind == "required" else kind}
    if not parallel and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def encode_request(req: ChatRequest) -> dict[str, Any]:
    """Anthropic body for a canonical request (used when the client spoke OpenAI)."""
    body: dict[str, Any] = {
        "model": req.model,
        "max_tokens": req.max_tokens if req.max_tokens is not None else DEFAULT_MAX_TOKENS,
        "messages": _encode_messages(req.messages),
    }
    if req.system:
        body["system"] = [encode_block(p) for p in req.system]
    if req.tools:
        body["tools"] = [
            with_cache_control(
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": dict(t.input_schema),
                },
                t.cache_control,
            )
            for t in req.tools
        ]
    optional = {
        "tool_choice": (
            _encode_tool_choice(req.tool_choice, req.extra.get("parallel_tool_calls") is not False)
            if req.tools
            else None
        ),
        "temperature": req.temperature,
        "top_p": req.top_p,
        "stop_sequences": list(req.stop) or None,
        "metadata": {"user_id": req.user} if req.user is not None else None,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    if req.stream:
        body["stream"] = True
    body.update((k, v) for k, v in req.extra.items() if k in ANTHROPIC_EXTRA_FIELDS)
    schema = json_schema_of(req.extra.get("response_format"))
    if schema is not None:  # Anthropic's structured outputs: the reply's text is that JSON
        body["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    return body
