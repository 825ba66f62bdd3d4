"""A corpus of client bodies and tenant policies for the golden `prepare` tests: both wires,
thinking blocks, tool calls and results, volatile text, public prefixes, every cache scope."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from policies.model import TenantPolicy

Body = dict[str, Any]
SYSTEM = "You are Acme's coding agent. Time: 2026-11-30T09:18:42Z. Request req_8f3k2m9x1q. " + (
    "Follow the house rules carefully. " * 60
)


def _schema(i: int) -> Body:
    return {
        "type": "object",
        "required": ["query", "path"],
        "properties": {
            "query": {"type": "string", "description": f"what to look for (ticket-{i})"},
            "path": {"type": "string", "enum": ["b", "a"]},
            "limit": {"type": "integer", "minimum": 1},
        },
    }


def _names(n: int) -> list[str]:
    return [f"tool_{(7 * i) % n:02d}" for i in range(n)]


def anthropic_agent(num_tools: int = 12, turns: int = 20) -> Body:
    """An agent's Anthropic body: tools out of order, a thinking block, many tool turns."""
    tools = [
        {"name": n, "description": f"{n} in the workspace. " * 6, "input_schema": _schema(i)}
        for i, n in enumerate(_names(num_tools))
    ]
    messages: list[Body] = [{"role": "user", "content": "Fix the failing test. " * 20}]
    for t in range(1, turns):
        assistant: list[Body] = [
            {"type": "tool_use", "id": f"toolu_{t}", "name": "tool_01", "input": {"z": t, "a": 1}}
        ]
        if t == 1:
            assistant.insert(0, {"type": "thinking", "thinking": "plan", "signature": "sig=="})
        messages.append({"role": "assistant", "content": assistant})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": "line\n" * 60}
        messages.append({"role": "user", "content": [result]})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": SYSTEM,
        "tools": tools,
        "messages": messages,
        "metadata": {"user_id": "u-1"},
        "unknown_field": {"b": 1, "a": [2, 1]},
    }


def openai_agent(num_tools: int = 12, turns: int = 20) -> Body:
    """The same agent on the OpenAI wire, with a developer message and a later system note."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": f"{n} in the workspace. " * 6,
                "parameters": _schema(i),
            },
        }
        for i, n in enumerate(_names(num_tools))
    ]
    messages: list[Body] = [
        {"role": "developer", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing test. " * 20},
    ]
    for t in range(1, turns):
        call = {"id": f"call_{t}", "type": "function"}
        call["function"] = {"name": "tool_01", "arguments": f'{{"z": {t}, "a": 1}}'}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": "line\n" * 60})
        if t == turns // 2:
            messages.append({"role": "system", "content": "Note at 2026-11-30."})
    return {
        "model": "gpt-4o",
        "messages": messages,
        "tools": tools,
        "user": "u-1",
        "unknown_field": {"b": 1, "a": [2, 1]},
    }


def anthropic_blocks_system() -> Body:
    """System as text blocks with a client marker, a client marker on a tool, a prefill."""
    body = anthropic_agent(num_tools=3, turns=3)
    body["system"] = [
        {"type": "text", "text": "Public head. " * 30},
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    body["tools"][0]["cache_control"] = {"type": "ephemeral"}
    body["messages"].append({"role": "assistant", "content": "Sure"})
    return body


BODIES: dict[str, tuple[str, Body]] = {
    "anthropic_agent": ("anthropic", anthropic_agent()),
    "openai_agent": ("openai", openai_agent()),
    "anthropic_small": ("anthropic", anthropic_agent(num_tools=2, turns=1)),
    "openai_small": ("openai", openai_agent(num_tools=2, turns=2)),
    "anthropic_blocks": ("anthropic", anthropic_blocks_system()),
}

PUBLIC_SYSTEM = hashlib.sha256(("Public head. " * 30).encode()).hexdigest()
POLICIES: dict[str, Body] = {
    "default": {},
    # the defaults before the autopilot acted on what it sees: history and values left in place
    "legacy": {"normalise": {"relocate_volatile": "never", "canonical_tool_args": False}},
    "relocate": {
        "ttl": "1h",
        "normalise": {
            "relocate_volatile": True,
            "canonical_tool_args": True,
            "volatile_patterns": [r"ticket-\d+"],
        },
    },
    "public": {"public_prefixes": [{"tool": "tool_00"}, {"system_sha256": PUBLIC_SYSTEM}]},
    "shared": {"scope": "shared"},
    "none": {"scope": "none"},
    "plain": {"markers": "off", "normalise": {"order_tools": False, "canonical_json": False}},
}


def tenant(policy: str) -> TenantPolicy:
    return TenantPolicy.model_validate({"tenant": "acme", "cache": POLICIES[policy]})


def cases() -> list[tuple[str, str, str, bool]]:
    """(case id, body name, policy name, isolate)."""
    out = []
    for body in BODIES:
        for policy in POLICIES:
            for isolate in (False, True):
                out.append(
                    (f"{body}/{policy}/{'isolated' if isolate else 'plain'}", body, policy, isolate)
                )
    return out


def body(name: str) -> tuple[str, Body]:
    wire, value = BODIES[name]
    return wire, copy.deepcopy(value)
