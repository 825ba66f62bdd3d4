"""How tools, tool calls and tool results appear in the prompt, and the grammar of a forced call.

A chat template that reads a `tools` variable gets the tools and the history as the model was
trained (assistant `tool_calls` with arguments as objects, `tool` messages as they are). For a
template without one (SmolLM2-135M-Instruct's) the fallback is the Hermes format: the tools as JSON
lines inside <tools></tools> in the system message, each call as
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, each result as a user turn inside
<tool_response></tool_response>. Both formats have the model write calls in those tags.
"""

from __future__ import annotations

import json
from typing import Any

CALL_OPEN = "<tool_call>\n"
CALL_CLOSE = "\n</tool_call>"
FALLBACK_PREAMBLE = (
    "You are a function calling AI model. You may call one or more functions to assist with the "
    "user query. Function signatures are within <tools></tools> XML tags:\n<tools>\n"
)
FALLBACK_POSTAMBLE = (
    "\n</tools>\nFor each function call, return a JSON object with the function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
RESULT_OPEN = "<tool_response>\n"
RESULT_CLOSE = "\n</tool_response>"


def fallback_card() -> dict[str, str]:
    """The fallback format's texts, served in the tokenizer card so that a gateway renders (and
    counts) a prompt with tools as `fallback_messages` does."""
    return {
        "preamble": FALLBACK_PREAMBLE,
        "postamble": FALLBACK_POSTAMBLE,
        "call_open": CALL_OPEN,
        "call_close": CALL_CLOSE,
        "result_open": RESULT_OPEN,
        "result_close": RESULT_CLOSE,
    }


def call_text(name: str, arguments: str) -> str:
    """One call as the model writes it; `arguments` is the JSON text, kept byte for byte."""
    return (
        f'{CALL_OPEN}{{"name": {json.dumps(name)}, "arguments": {arguments or "{}"}}}{CALL_CLOSE}'
    )


def call_schema(functions: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call's body, `{"name": ..., "arguments": ...}`, for these functions."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f["name"]},
                "arguments": f.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def fallback_messages(
    messages: list[dict[str, Any]], functions: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Text-only messages for a template without tools: the tools in the system message, calls
    and results in the tags above."""
    rendered = [_fallback_message(m) for m in messages]
    if not functions:
        return rendered
    block = FALLBACK_PREAMBLE + "\n".join(json.dumps(f) for f in functions) + FALLBACK_POSTAMBLE
    if rendered and rendered[0]["role"] == "system":
        system = rendered[0]["content"]
        return [{"role": "system", "content": f"{system}\n\n{block}"}, *rendered[1:]]
    return [{"role": "system", "content": block}, *rendered]


def _fallback_message(message: dict[str, Any]) -> dict[str, Any]:
    role, content = message["role"], message["content"]
    if role == "tool":
        return {"role": "user", "content": f"{RESULT_OPEN}{content}{RESULT_CLOSE}"}
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        text = "\n".join(
            call_text(c["function"]["name"], c["function"].get("arguments", "")) for c in calls
        )
        return {"role": role, "content": f"{content}\n{text}" if content else text}
    return {"role": role, "content": content}


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template with tools: assistant call arguments as objects (what HF chat
    templates expect: they serialise them with `tojson`)."""
    return [_native_message(m) for m in messages]


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
