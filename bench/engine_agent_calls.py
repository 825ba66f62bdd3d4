"""The calls of the agent-traffic run (`bench/engine_agent_traffic.py`) and what each must show:
a seeded mix of forced tool calls, `tool_choice: required`, JSON response formats and free text
with penalties and logit bias, and the check of one call's reply against its ledger row.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import jsonschema

# No `additionalProperties: false`: the model may add properties until its budget runs out.
LOOSE_TIME = {
    "type": "object",
    "properties": {"tz": {"type": "string"}, "city": {"type": "string"}},
    "required": ["tz"],
}
STRICT_WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z .'-]{1,24}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
NESTED_TICKET = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "level": {"enum": ["low", "high"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "required": ["title", "level", "where"],
    "additionalProperties": False,
}
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "get_weather": ("Current weather in a city", STRICT_WEATHER),
    "get_time": ('Local time somewhere; "tz" is an IANA zone', LOOSE_TIME),
}
KINDS = ("forced_strict", "forced_loose", "required", "json_schema", "json_object", "penalties")
QUESTIONS = (
    "What is the weather in Paris right now?",
    "What time is it in Tokyo? Answer with the tool.",
    'File a ticket: the "login" page fails\\ on Safari.',
    "Describe the sea in one line.",
    "Which city is warmer today, Oslo or Rome?",
    "Summarise: agents call tools, then answer in JSON.",
)
MAX_TOKENS = {"penalties": 16, "json_schema": 64}  # the ticket's skeleton alone is ~30 tokens
DEFAULT_MAX_TOKENS = 40


@dataclass(frozen=True)
class CallSpec:
    index: int
    kind: str
    stream: bool
    body: dict[str, Any]  # the openai SDK's keyword arguments, without model and stream

    @property
    def session(self) -> str:
        return f"agent-traffic-{self.index:04d}"

    @property
    def max_tokens(self) -> int:
        return int(self.body["max_tokens"])

    @property
    def schema(self) -> dict[str, Any] | None:
        """The schema the reply's JSON must validate against; None: any JSON object."""
        if self.kind == "json_schema":
            return NESTED_TICKET
        return None


@dataclass
class Outcome:
    spec: CallSpec
    status: int
    finish: str | None = None
    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""


def _tool(name: str) -> dict[str, Any]:
    description, schema = TOOLS[name]
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


def make_calls(rng: random.Random, n: int) -> list[CallSpec]:
    """`n` calls cycling through KINDS, each with its own seeded temperature, seed, prompt and
    sampling options; about a quarter streamed."""
    return [_call(rng, i, KINDS[i % len(KINDS)]) for i in range(n)]


def _call(rng: random.Random, index: int, kind: str) -> CallSpec:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": rng.choice(QUESTIONS)}],
        "max_tokens": MAX_TOKENS.get(kind, DEFAULT_MAX_TOKENS),
        "temperature": rng.choice((0.0, 1.0)),
        "seed": rng.randrange(1 << 31),
    }
    if kind == "forced_strict":
        body["tools"] = [_tool("get_weather"), _tool("get_time")]
        body["tool_choice"] = {"type": "function", "function": {"name": "get_weather"}}
    elif kind == "forced_loose":
        body["tools"] = [_tool("get_time")]
        body["tool_choice"] = {"type": "function", "function": {"name": "get_time"}}
    elif kind == "required":
        body["tools"] = [_tool("get_weather"), _tool("get_time")]
        body["tool_choice"] = "required"
    elif kind == "json_schema":
        schema = {"name": "ticket", "schema": NESTED_TICKET}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    if kind == "penalties" or rng.random() < 0.3:  # penalties and bias on guided calls too
        body["presence_penalty"] = round(rng.uniform(-1.0, 1.5), 2)
        body["frequency_penalty"] = round(rng.uniform(-1.0, 1.5), 2)
        body["logit_bias"] = {str(rng.randrange(49152)): rng.choice((-100, -5, 5)) for _ in "abc"}
    return CallSpec(index, kind, rng.random() < 0.25, body)


def check_outcome(outcome: Outcome, ledger: tuple[int, int] | None) -> list[str]:
    """What is wrong with one call's reply (empty: nothing)."""
    spec = outcome.spec
    tag = f"#{spec.index} {spec.kind}{' stream' if spec.stream else ''}"
    if outcome.status >= 500:
        return [f"{tag}: {outcome.status} {outcome.error}"]
    if outcome.status != 200 or outcome.error:
        return [f"{tag}: {outcome.status} {outcome.error}"]
    problems = [f"{tag}: {p}" for p in _reply_problems(outcome)]
    if outcome.completion_tokens > spec.max_tokens:
        problems.append(f"{tag}: {outcome.completion_tokens} tokens > max {spec.max_tokens}")
    counted = (outcome.prompt_tokens, outcome.completion_tokens)
    if ledger != counted:
        problems.append(f"{tag}: ledger {ledger} != engine {counted}")
    return problems


def _reply_problems(outcome: Outcome) -> list[str]:
    kind, finish = outcome.spec.kind, outcome.finish
    forced = kind in ("forced_strict", "forced_loose", "required")
    if finish == "length":  # a stream sent the call's deltas before the cut; `length` says so
        cut_claims = outcome.calls and not outcome.spec.stream
        return ["a call cut at length claims a tool call"] if cut_claims else []
    if finish not in ("stop", "tool_calls"):
        return [f"finish_reason {finish!r}"]
    if forced:
        if finish != "tool_calls" or len(outcome.calls) != 1:
            return [f"forced call ended {finish} with {len(outcome.calls)} calls"]
        name, arguments = outcome.calls[0]
        wanted = {"forced_strict": ("get_weather",), "forced_loose": ("get_time",)}
        if name not in wanted.get(kind, tuple(TOOLS)):
            return [f"called {name!r}"]
        return _json_problems(arguments, TOOLS[name][1])
    if kind in ("json_schema", "json_object"):
        return _json_problems(outcome.content, outcome.spec.schema)
    return []


def _json_problems(text: str, schema: dict[str, Any] | None) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        return [f"not JSON: {text!r}"]
    if not isinstance(value, dict):
        return [f"not an object: {text!r}"]
    try:
        jsonschema.validate(value, schema or {"type": "object"})
    except jsonschema.ValidationError as exc:
        return [f"invalid ({exc.message}): {text!r}"]
    return []
