"""The chat a self-hosted engine renders for a request: its messages and, unless `tool_choice` is
"none", its tools, either passed to a chat template that renders them or written into the
messages in the engine's fallback format (the texts its tokenizer card's `tool_format` gives).
Mirrors `selfhost/structured/chat_plan.py` and `tool_format.py` across the process boundary
(tested equal); must not import `selfhost`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.types import ChatRequest
from adapters.wire import openai as openai_wire

FALLBACK_KEYS = ("preamble", "postamble", "call_open", "call_close", "result_open", "result_close")


@dataclass(frozen=True)
class EnginePrompt:
    """What an engine's prompt is rendered from: messages as the engine's template reads them
    (content flattened to text), the tools as OpenAI tool objects (unset fields left out) and
    the OpenAI `tool_choice`. JSON values: this is the wire's edge."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: Any = None


@dataclass(frozen=True)
class FallbackToolFormat:
    """The engine's tool format for templates without tools (Hermes: tags around JSON)."""

    preamble: str
    postamble: str
    call_open: str
    call_close: str
    result_open: str
    result_close: str

    @classmethod
    def from_card(cls, value: Any) -> FallbackToolFormat | None:
        if not isinstance(value, Mapping) or not all(
            isinstance(value.get(k), str) for k in FALLBACK_KEYS
        ):
            return None
        return cls(**{k: str(value[k]) for k in FALLBACK_KEYS})


def engine_prompt(request: ChatRequest) -> EnginePrompt:
    """The prompt parts of the OpenAI body the gateway sends an engine for `request`. Each
    system part is a message of its own: a client's leading system messages were merged into
    parts when decoded, and counting them apart is never less."""
    body = openai_wire.encode_request(request)
    messages: list[dict[str, Any]] = body["messages"]
    if request.system:
        messages = [{"role": "system", "content": p.text} for p in request.system] + messages[1:]
    tools = [
        {**tool, "function": {k: v for k, v in tool["function"].items() if v is not None}}
        for tool in body.get("tools") or []
    ]
    flat = [{**m, "content": _content_text(m.get("content"))} for m in messages]
    return EnginePrompt(flat, tools, body.get("tool_choice"))


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def rendered_chat(
    prompt: EnginePrompt, fallback: FallbackToolFormat | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools) as the engine passes them to its chat template; `fallback`: None when
    the template renders tools itself."""
    choice = prompt.tool_choice
    if choice is None:
        choice = "auto" if prompt.tools else "none"
    functions = [t["function"] for t in prompt.tools] if choice != "none" else []
    if fallback is None:
        tools = [{"type": "function", "function": f} for f in functions]
        return [_native_message(m) for m in prompt.messages], tools or None
    messages = [_fallback_message(m, fallback) for m in prompt.messages]
    if not functions:
        return messages, None
    lines = "\n".join(json.dumps(f) for f in functions)
    block = fallback.preamble + lines + fallback.postamble
    if messages and messages[0]["role"] == "system":
        system = messages[0]["content"]
        return [{"role": "system", "content": f"{system}\n\n{block}"}, *messages[1:]], None
    return [{"role": "system", "content": block}, *messages], None


def _fallback_message(message: dict[str, Any], fmt: FallbackToolFormat) -> dict[str, Any]:
    role, content = message["role"], message["content"]
    if role == "tool":
        return {"role": "user", "content": f"{fmt.result_open}{content}{fmt.result_close}"}
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        text = "\n".join(
            _call_text(c["function"]["name"], c["function"].get("arguments", ""), fmt)
            for c in calls
        )
        return {"role": role, "content": f"{content}\n{text}" if content else text}
    return {"role": role, "content": content}


def _call_text(name: str, arguments: str, fmt: FallbackToolFormat) -> str:
    body = f'{{"name": {json.dumps(name)}, "arguments": {arguments or "{}"}}}'
    return f"{fmt.call_open}{body}{fmt.call_close}"


def _native_message(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    return {**message, "tool_calls": [_with_object_arguments(c) for c in calls]}


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = function.get("arguments")
    return {**call, "function": {**function, "arguments": arguments}}
