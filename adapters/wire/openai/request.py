"""OpenAI chat-completions request JSON <-> canonical ChatRequest.

Pure functions at the JSON edge; no I/O. Responses live in `response.py`, streaming in
`stream.py`, tool lists in `tools.py`; the package's `__init__` is the one import for the format.
Canonical `tool_choice` is None | "auto" | "none" | "required" | {"name": <tool>}.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.errors import WireFormatError
from adapters.types import (
    JSON,
    CacheControl,
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)
from adapters.wire.json_fields import cache_control_at, expect, optional, with_cache_control
from adapters.wire.openai.response import (
    decode_tool_calls,
    encode_tool_calls,
)
from adapters.wire.openai.tools import (
    ToolListMemo,
    decode_tool_list,
)

__all__ = [
    "OPENAI_EXTRA_FIELDS",
    "decode_message",
    "decode_request",
    "encode_request",
    "include_usage",
    "split_system",
]


OPENAI_EXTRA_FIELDS = frozenset(
    {
        "seed",
        "response_format",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "parallel_tool_calls",
        "reasoning_effort",
        "service_tier",
        "stream_options",
        "metadata",
        "store",
        "modalities",
        "prediction",
        "verbosity",
        "safety_identifier",
        "prompt_cache_retention",
        "web_search_options",
    }
)


_KNOWN = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "stream",
        "user",
        "prompt_cache_key",
        "cache_salt",
    }
)


# Parts the canonical model cannot hold; skipped when decoding (they survive only on the
# same-wire path, where the client's raw JSON is forwarded).
_SKIPPED_PARTS = frozenset({"input_audio", "file", "refusal"})


def _image_part(part: Mapping[str, Any], path: str) -> ImagePart:
    image = expect(part.get("image_url"), dict, f"{path}.image_url")
    url = expect(image.get("url"), str, f"{path}.image_url.url")
    cc = cache_control_at(part, path)
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return ImagePart(media_type=head[5:], data_b64=data, cache_control=cc)
    return ImagePart(url=url, cache_control=cc)


def _content(value: Any, path: str) -> tuple[TextPart | ImagePart, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (TextPart(value),) if value else ()
    parts: list[TextPart | ImagePart] = []
    for i, part in enumerate(expect(value, list, path)):
        p = f"{path}[{i}]"
        kind = expect(expect(part, dict, p).get("type"), str, f"{p}.type")
        if kind == "text":
            text = expect(part.get("text"), str, f"{p}.text")
            parts.append(TextPart(text, cache_control_at(part, p)))
        elif kind == "image_url":
            parts.append(_image_part(part, p))
        elif kind not in _SKIPPED_PARTS:
            raise WireFormatError(f"{p}.type", f"unsupported content part type {kind!r}")
    return tuple(parts)


def decode_message(msg: Any, path: str) -> Message:
    expect(msg, dict, path)
    role = msg.get("role")
    name = msg.get("name")
    if role in ("system", "developer", "user", "tool") and msg.get("content") is None:
        raise WireFormatError(f"{path}.content", f"required in a {role} message")
    if role in ("system", "developer", "user"):
        canonical_role: Role = "user" if role == "user" else "system"
        return Message(canonical_role, _content(msg.get("content"), f"{path}.content"), name)
    if role == "assistant":
        parts: list[ContentPart] = list(_content(msg.get("content"), f"{path}.content"))
        if msg.get("tool_calls") is not None:
            parts.extend(decode_tool_calls(msg["tool_calls"], f"{path}.tool_calls"))
        return Message("assistant", tuple(parts), name)
    if role == "tool":
        tool_use_id = expect(msg.get("tool_call_id"), str, f"{path}.tool_call_id")
        result = ToolResultPart(tool_use_id, _content(msg.get("content"), f"{path}.content"))
        return Message("tool", (result,), name)
    raise WireFormatError(f"{path}.role", f"unsupported role {role!r}")


_PLAIN_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user"}


def _decode_messages(raw_messages: list[Any]) -> list[Message]:
    """`decode_message` of each; the common shapes (text content as a string, no tool calls)
    built here directly, equal to what it builds: an agent re-sends its whole history on every
    call, and these make most of it."""
    messages: list[Message] = []
    for i, msg in enumerate(raw_messages):
        if type(msg) is dict and type(content := msg.get("content")) is str:
            role = msg.get("role")
            parts: tuple[TextPart, ...] = (TextPart(content),) if content else ()
            canonical = _PLAIN_ROLES.get(role) if type(role) is str else None
            if canonical is not None:
                messages.append(Message(canonical, parts, msg.get("name")))
                continue
            if role == "assistant" and msg.get("tool_calls") is None:
                messages.append(Message("assistant", parts, msg.get("name")))
                continue
            if role == "tool" and type(call_id := msg.get("tool_call_id")) is str:
                result = ToolResultPart(call_id, parts)
                messages.append(Message("tool", (result,), msg.get("name")))
                continue
        messages.append(decode_message(msg, f"messages[{i}]"))
    return messages


def _tool_choice(value: Any) -> JSON:
    if value is None or value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        return {"name": expect(value["function"].get("name"), str, "tool_choice.function.name")}
    raise WireFormatError("tool_choice", "expected 'auto', 'none', 'required' or a function")


def split_system(messages: list[Message]) -> tuple[tuple[TextPart, ...], tuple[Message, ...]]:
    """Leading system messages become `system`; later ones stay in place as system messages."""
    system: list[TextPart] = []
    i = 0
    while i < len(messages) and messages[i].role == "system":
        system.extend(p for p in messages[i].content if isinstance(p, TextPart))
        i += 1
    return tuple(system), tuple(messages[i:])


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(expect(s, str, f"stop[{i}]") for i, s in enumerate(expect(value, list, "stop")))


def decode_request(body: Mapping[str, Any], tool_lists: ToolListMemo | None = None) -> ChatRequest:
    """Canonical form of an OpenAI `/v1/chat/completions` body; raises WireFormatError(path).
    With `tool_lists`, the tools come from that memo (equal values, shared objects)."""
    expect(body, dict, "$")
    model = expect(body.get("model"), str, "model")
    raw_messages = expect(body.get("messages"), list, "messages")
    if (options := body.get("stream_options")) is not None:
        _stream_options(options)
    system, rest = split_system(_decode_messages(raw_messages))
    # the optional fields read inline, in the order their errors are named (`optional` per
    # field was a call each for fields mostly absent)
    get = body.get
    max_tokens = get("max_completion_tokens")
    if max_tokens is not None:
        expect(max_tokens, int, "max_completion_tokens")
    elif (max_tokens := get("max_tokens")) is not None:
        expect(max_tokens, int, "max_tokens")
    tools = decode_tool_list(body["tools"], tool_lists) if get("tools") else ()
    tool_choice = None if (choice := get("tool_choice")) is None else _tool_choice(choice)
    if (temperature := get("temperature")) is not None:
        expect(temperature, (int, float), "temperature")
    if (top_p := get("top_p")) is not None:
        expect(top_p, (int, float), "top_p")
    stop = () if (stops := get("stop")) is None else _stop(stops)
    if (stream := get("stream")) is not None:
        expect(stream, bool, "stream")
    if (prompt_cache_key := get("prompt_cache_key")) is not None:
        expect(prompt_cache_key, str, "prompt_cache_key")
    if (cache_salt := get("cache_salt")) is not None:
        expect(cache_salt, str, "cache_salt")
    if (user := get("user")) is not None:
        expect(user, str, "user")
    if not user:
        user = optional(body, "safety_identifier", str)
    request = ChatRequest(
        model=model,
        messages=rest,
        system=system,
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=stop,
        stream=bool(stream),
        prompt_cache_key=prompt_cache_key,
        cache_salt=cache_salt,
        user=user,
        extra={k: v for k, v in body.items() if k not in _KNOWN},
    )
    return _with_messages(request, raw_messages)


def _with_messages(request: ChatRequest, raw_messages: list[Any]) -> ChatRequest:
    """Checked last, so that every other field's error is named first."""
    if not raw_messages:
        raise WireFormatError("messages", "must hold at least one message")
    return request


def _stream_options(value: Any) -> None:
    """`stream_options` is passed on, so its shape is checked here: an object whose
    `include_usage`, when present, is a boolean."""
    if value is not None:
        usage = expect(value, dict, "stream_options").get("include_usage")
        if usage is not None:
            expect(usage, bool, "stream_options.include_usage")


def include_usage(body: Mapping[str, Any]) -> bool:
    """Whether an OpenAI streaming client asked for the final usage chunk."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


# --- encoding ------------------------------------------------------------------------------------


def _encode_cc(out: dict[str, Any], cc: CacheControl | None, with_cache: bool) -> dict[str, Any]:
    return with_cache_control(out, cc) if with_cache else out


def _encode_part(part: TextPart | ImagePart, with_cache: bool) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return _encode_cc({"type": "text", "text": part.text}, part.cache_control, with_cache)
    url = part.url if part.url is not None else f"data:{part.media_type};base64,{part.data_b64}"
    return _encode_cc(
        {"type": "image_url", "image_url": {"url": url}}, part.cache_control, with_cache
    )


def _encode_content(parts: tuple[Any, ...], with_cache: bool) -> str | list[dict[str, Any]]:
    plain = [p for p in parts if isinstance(p, TextPart | ImagePart)]
    if not plain:
        return ""
    if (
        len(plain) == 1
        and isinstance(plain[0], TextPart)
        and (not with_cache or plain[0].cache_control is None)
    ):
        return plain[0].text
    return [_encode_part(p, with_cache) for p in plain]


def _encode_message(msg: Message, with_cache: bool) -> list[dict[str, Any]]:
    """One canonical message may carry tool results (Anthropic style): those become tool msgs."""
    out: list[dict[str, Any]] = []
    for part in msg.content:
        if isinstance(part, ToolResultPart):
            content = _encode_content(part.content, with_cache)
            out.append({"role": "tool", "tool_call_id": part.tool_use_id, "content": content})
    rest = tuple(p for p in msg.content if not isinstance(p, ToolResultPart))
    if msg.role == "tool" or (not rest and out):
        return out
    encoded: dict[str, Any] = {"role": msg.role}
    if msg.role == "assistant":
        calls = [p for p in rest if isinstance(p, ToolUsePart)]
        text = "".join(p.text for p in rest if isinstance(p, TextPart))
        encoded["content"] = text if text or not calls else None
        if calls:
            encoded["tool_calls"] = encode_tool_calls(calls)
    else:
        encoded["content"] = _encode_content(rest, with_cache)
    if msg.name is not None:
        encoded["name"] = msg.name
    out.append(encoded)
    return out


def _encode_tool_choice(choice: JSON) -> JSON:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def encode_request(req: ChatRequest, *, cache_control: bool = False) -> dict[str, Any]:
    """OpenAI body for a canonical request. `cache_control=True` keeps Anthropic-style markers
    on content parts (LiteLLM forwards them to providers that cache); OpenAI proper rejects them."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": _encode_content(req.system, cache_control)})
    for msg in req.messages:
        messages.extend(_encode_message(msg, cache_control))
    body: dict[str, Any] = {"model": req.model, "messages": messages}
    if req.tools:
        body["tools"] = [
            _encode_cc(
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.input_schema),
                    },
                },
                t.cache_control,
                cache_control,
            )
            for t in req.tools
        ]
    optional = {
        "tool_choice": _encode_tool_choice(req.tool_choice),
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "user": req.user,
        "stop": list(req.stop) or None,
        "prompt_cache_key": req.prompt_cache_key,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    if req.stream:
        body["stream"] = True
    body.update((k, v) for k, v in req.extra.items() if k in OPENAI_EXTRA_FIELDS)
    return body
