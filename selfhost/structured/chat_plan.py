"""What a chat request's `tools`, `tool_choice` and `response_format` mean for the engine: the
messages (and tools) the template renders, the grammar the output must follow, whether tool calls
are parsed out. A request the engine cannot honour raises GrammarRejected naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from selfhost.structured.budget import reserve_tokens
from selfhost.structured.grammar import (
    GrammarCompiler,
    GrammarRejected,
    Guide,
    json_grammar,
    tagged_json_grammar,
)
from selfhost.structured.tool_format import (
    CALL_CLOSE,
    CALL_OPEN,
    call_schema,
    fallback_messages,
    native_messages,
)


@dataclass(frozen=True)
class ChatPlan:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None  # for a template that renders tools itself
    parses_calls: bool
    grammar: str | None = None
    field: str = ""  # the request field the grammar comes from (named in a 400)
    parts: tuple[tuple[str, str], ...] = ()  # (field, grammar) of each schema, to name the bad one
    tail: str = ""  # the grammar's fixed text after the JSON (a call's close tag)


def plan_chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: str | dict[str, Any] | None,
    response_format: dict[str, Any] | None,
    native: bool,
) -> ChatPlan:
    """`tools`: OpenAI tool objects; `native`: the chat template renders a `tools` variable."""
    choice = tool_choice if tool_choice is not None else ("auto" if tools else "none")
    functions = [tool["function"] for tool in tools] if choice != "none" else []
    rendered = native_messages(messages) if native else fallback_messages(messages, functions)
    plan_tools = [{"type": "function", "function": f} for f in functions] if native else None
    base = ChatPlan(rendered, plan_tools or None, parses_calls=bool(functions))
    forced = _forced_functions(choice, functions)
    if forced is None:
        return _with_response_format(base, response_format)
    if response_format is not None and response_format.get("type", "text") != "text":
        raise GrammarRejected("response_format", "cannot be combined with a forced tool_choice")
    grammar = tagged_json_grammar(CALL_OPEN, call_schema(forced), CALL_CLOSE)
    parts = tuple(
        (f"tools[{functions.index(f)}].function.parameters", json_grammar(_parameters(f)))
        for f in forced
    )
    return ChatPlan(base.messages, base.tools, True, grammar, "tools", parts, CALL_CLOSE)


def _forced_functions(
    choice: str | dict[str, Any], functions: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The functions a call must be one of (None: the model may answer freely)."""
    if choice in ("auto", "none"):
        return None
    if not functions:
        raise GrammarRejected("tool_choice", "a forced tool_choice needs `tools`")
    if choice == "required":
        return functions
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str):
        raise GrammarRejected("tool_choice", "expected 'auto', 'none', 'required' or a function")
    matches = [f for f in functions if f["name"] == name]
    if not matches:
        raise GrammarRejected("tool_choice.function.name", f"no tool named {name!r} in `tools`")
    return matches


def _with_response_format(plan: ChatPlan, response_format: dict[str, Any] | None) -> ChatPlan:
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return plan
    if kind == "json_object":
        grammar = json_grammar({"type": "object"})
        return ChatPlan(plan.messages, plan.tools, plan.parses_calls, grammar, "response_format")
    if kind != "json_schema":
        raise GrammarRejected("response_format.type", f"unknown type {kind!r}")
    schema = (response_format or {}).get("json_schema", {}).get("schema")
    if not isinstance(schema, dict):
        raise GrammarRejected(
            "response_format.json_schema.schema", "a JSON schema object is needed"
        )
    field = "response_format.json_schema.schema"
    return ChatPlan(plan.messages, plan.tools, plan.parses_calls, json_grammar(schema), field)


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters")
    return parameters if isinstance(parameters, dict) else {"type": "object"}


def compile_guide(compiler: GrammarCompiler, plan: ChatPlan) -> Guide | None:
    """The plan's grammar state, or GrammarRejected naming the schema that cannot be expressed.
    Blocking (compiles on a cache miss): call it off the event loop."""
    if plan.grammar is None:
        return None
    reserve = reserve_tokens(compiler.num_tokens(plan.tail))
    try:
        return compiler.guide(plan.grammar, plan.field, reserve)
    except GrammarRejected:
        for field, grammar in plan.parts:
            compiler.check(grammar, field)
        raise
