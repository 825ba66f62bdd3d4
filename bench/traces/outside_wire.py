"""An agent's conversation as a framework sends it on one wire, messy or stable.

`Agent` holds a neutral conversation; `Agent.body(t, stable=...)` renders call t on the OpenAI
or Anthropic wire with the framework's habits (a clock and request id in the system prompt,
tools in a new order, tool-call arguments and schemas re-serialised in a new key order).
`stable=True` renders the same call as a client with a prefix stable from the first call would:
the first call's header values, tools and keys in the first call's order, and the header values
that changed since the first call in a short note at the end of the newest turn (the same
information, where any client must send it uncached). History edits are content, so both
renderings carry them.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass
class Habits:
    """What the framework does to each call. `header(t)` fills the system prompt's slots."""

    header: Callable[[int], dict[str, str]]
    tool_order: Callable[[int], int] = lambda t: 0  # a new seed: a new tool order
    arg_keys: bool = False  # re-serialises tool-call arguments in a random key order
    schema_keys: bool = False  # re-serialises tool schemas in a random key order
    system_blocks: bool = False  # Anthropic system as a list of text blocks
    system_role: str = "system"  # OpenAI: "system" or "developer"
    metadata: Json | None = None  # Anthropic `metadata` the framework sends


@dataclass
class Agent:
    wire: str  # "openai" | "anthropic": the wire the client speaks
    model: str
    system: list[str]  # templates with {slot} placeholders
    tools: list[Json]  # neutral: name, description, schema
    habits: Habits
    seed: int
    max_tokens: int = 1024
    messages: list[Json] = field(default_factory=list)  # neutral turns

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "text": text})

    def act(self, text: str, calls: list[tuple[str, str, Json]]) -> None:
        """The model's turn: text and tool calls (id, name, arguments in its key order)."""
        self.messages.append({"role": "assistant", "text": text, "calls": calls})

    def observe(self, results: list[tuple[str, str]]) -> None:
        self.messages.append({"role": "tool", "results": results})

    def body(self, t: int, *, stable: bool) -> Json:
        rng = random.Random(self.seed * 1009 + t)
        slots = self.habits.header(0 if stable else t)
        system = [part.format(**slots) for part in self.system]
        tools = list(self.tools)
        order = 0 if stable else self.habits.tool_order(t)
        if order:
            random.Random(order).shuffle(tools)
        reorder = not stable
        if self.wire == "anthropic":
            body = self._anthropic(system, tools, rng, reorder)
        else:
            body = self._openai(system, tools, rng, reorder)
        note = self._changed_since_first(t) if stable else ""
        if note:
            _append_note(self.wire, body["messages"], note)
        return body

    def _changed_since_first(self, t: int) -> str:
        used = {slot for part in self.system for _, slot, _, _ in string.Formatter().parse(part)}
        now, first = self.habits.header(t), self.habits.header(0)
        return "\n".join(f"{k}: {now[k]}" for k in sorted(used - {None}) if now[k] != first[k])

    def _anthropic(
        self, system: list[str], tools: list[Json], rng: random.Random, re: bool
    ) -> Json:
        body: Json = {"model": self.model, "max_tokens": self.max_tokens}
        if self.habits.system_blocks:
            body["system"] = [{"type": "text", "text": s} for s in system]
        else:
            body["system"] = "\n\n".join(system)
        body["tools"] = [
            {
                "name": s["name"],
                "description": s["description"],
                "input_schema": _keys(s["schema"], rng, re and self.habits.schema_keys),
            }
            for s in tools
        ]
        body["messages"] = [self._anthropic_turn(m, rng, re) for m in self.messages]
        if self.habits.metadata is not None:
            body["metadata"] = self.habits.metadata
        return body

    def _anthropic_turn(self, m: Json, rng: random.Random, re: bool) -> Json:
        if m["role"] == "user":
            return {"role": "user", "content": [{"type": "text", "text": m["text"]}]}
        if m["role"] == "tool":
            results = [
                {"type": "tool_result", "tool_use_id": i, "content": out} for i, out in m["results"]
            ]
            return {"role": "user", "content": results}
        content: list[Json] = [{"type": "text", "text": m["text"]}] if m["text"] else []
        for call_id, name, args in m["calls"]:
            shaped = _keys(args, rng, re and self.habits.arg_keys)
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": shaped})
        return {"role": "assistant", "content": content}

    def _openai(self, system: list[str], tools: list[Json], rng: random.Random, re: bool) -> Json:
        messages: list[Json] = [{"role": self.habits.system_role, "content": "\n\n".join(system)}]
        for m in self.messages:
            messages.extend(self._openai_turn(m, rng, re))
        body: Json = {"model": self.model, "max_tokens": self.max_tokens, "messages": messages}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": s["name"],
                        "description": s["description"],
                        "parameters": _keys(s["schema"], rng, re and self.habits.schema_keys),
                    },
                }
                for s in tools
            ]
        return body

    def _openai_turn(self, m: Json, rng: random.Random, re: bool) -> list[Json]:
        if m["role"] == "user":
            return [{"role": "user", "content": m["text"]}]
        if m["role"] == "tool":
            return [{"role": "tool", "tool_call_id": i, "content": out} for i, out in m["results"]]
        turn: Json = {"role": "assistant", "content": m["text"] or None}
        if m["calls"]:
            turn["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": _arguments(args, rng, re and self.habits.arg_keys),
                    },
                }
                for call_id, name, args in m["calls"]
            ]
        return [turn]


def _append_note(wire: str, messages: list[Json], note: str) -> None:
    """A block of its own (a message of its own on the OpenAI wire), so that the next call,
    which no longer carries it, still shares everything before it."""
    if wire == "anthropic":
        last = messages[-1]
        last["content"] = [*last["content"], {"type": "text", "text": note}]
    else:
        messages.append({"role": "user", "content": note})


def _keys(value: Any, rng: random.Random, shuffle: bool) -> Any:
    """The same JSON value; with `shuffle`, every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        if shuffle:
            rng.shuffle(keys)
        return {k: _keys(value[k], rng, shuffle) for k in keys}
    if isinstance(value, list):
        return [_keys(v, rng, shuffle) for v in value]
    return value


def _arguments(args: Json, rng: random.Random, shuffle: bool) -> str:
    """As the model wrote it (compact, its key order), or as a map round trip re-serialises it."""
    if shuffle:
        return json.dumps(_keys(args, rng, True))
    return json.dumps(args, separators=(",", ":"))
