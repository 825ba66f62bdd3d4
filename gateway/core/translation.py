"""Which request fields survive translation between wire formats, and the 400 for those that
would not. Pure: a field a backend cannot honour is refused by name before anything is
reserved, never dropped on the way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from adapters.backend import Backend
from adapters.types import JSON, WireFormat
from adapters.wire.anthropic import output_schema_of
from adapters.wire.json_fields import json_schema_of
from gateway.errors import RequestRejected
from gateway.ports import ModelRoute

# A field and whether a value of it asks for something the other side cannot do (a neutral
# value, such as `n: 1` or `parallel_tool_calls: true`, changes nothing and passes).
Asks = Callable[[JSON], bool]


def _not(neutral: JSON) -> Asks:
    return lambda value: value is not None and value != neutral


def _anything(value: JSON) -> bool:
    return value is not None


def _json_format(value: JSON) -> bool:
    return isinstance(value, Mapping) and value.get("type") not in (None, "text")


def _thinking_on(value: JSON) -> bool:
    return isinstance(value, Mapping) and value.get("type") not in (None, "disabled")


def _tier(neutral: tuple[str, ...]) -> Asks:
    return lambda value: value is not None and value not in neutral


def _parallel_off(value: JSON) -> bool:
    return isinstance(value, Mapping) and value.get("disable_parallel_tool_use") is True


# OpenAI chat fields that neither Anthropic's API nor Bedrock Converse has (`user` and
# `safety_identifier` they take: as `metadata.user_id`, as Converse's `requestMetadata`)
OPENAI_ONLY: Mapping[str, Asks] = {
    "n": _not(1),
    "logprobs": _not(False),
    "top_logprobs": _anything,
    "response_format": _json_format,
    "parallel_tool_calls": _not(True),
    "logit_bias": _anything,
    "presence_penalty": _not(0),
    "frequency_penalty": _not(0),
    "seed": _anything,
    "modalities": _anything,
    "prediction": _anything,
    "audio": _anything,
    "web_search_options": _anything,
    "reasoning_effort": _anything,
    "service_tier": _tier(("auto",)),
    "store": _not(False),
    "metadata": _anything,
    "verbosity": _anything,
    "prompt_cache_retention": _anything,
    "functions": _anything,
    "function_call": _anything,
}


def _not_a_json_schema(value: JSON) -> bool:
    return _json_format(value) and json_schema_of(value) is None


# ... and those Anthropic's API does not take (`parallel_tool_calls: false` it does, as
# `tool_choice.disable_parallel_tool_use`; a JSON schema format as `output_config.format`)
OPENAI_NOT_ON_ANTHROPIC: Mapping[str, Asks] = {
    **{k: v for k, v in OPENAI_ONLY.items() if k != "parallel_tool_calls"},
    "response_format": _not_a_json_schema,
}

# ... and those Bedrock Converse does not take (a JSON schema format it does, as `outputConfig`)
OPENAI_NOT_ON_BEDROCK: Mapping[str, Asks] = {**OPENAI_ONLY, "response_format": _not_a_json_schema}

# ... and those the bundled engine does not take: it honours `seed`, `stop`, `logprobs`,
# `top_logprobs`, `response_format`, `tools`, `tool_choice`, the penalties and `logit_bias`,
# and answers one choice
ENGINE_HONOURS = frozenset(
    {
        "seed",
        "logprobs",
        "top_logprobs",
        "response_format",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
    }
)
NOT_ON_ENGINE: Mapping[str, Asks] = {
    k: v for k, v in OPENAI_ONLY.items() if k not in ENGINE_HONOURS
}


def _not_a_json_schema_output(value: JSON) -> bool:
    return value is not None and output_schema_of(value) is None


def _not_a_json_schema_beta_output(value: JSON) -> bool:
    return value is not None and output_schema_of(None, value) is None


# Anthropic Messages fields an OpenAI-style upstream has no slot for (a JSON schema output
# format it takes, as `response_format`)
ANTHROPIC_ONLY: Mapping[str, Asks] = {
    "thinking": _thinking_on,
    "top_k": _anything,
    "container": _anything,
    "mcp_servers": _anything,
    "context_management": _anything,
    "service_tier": _tier(("auto",)),
    "output_format": _not_a_json_schema_beta_output,
    "output_config": _not_a_json_schema_output,
}

# ... and those Bedrock Converse cannot carry either (thinking and top_k it can, and a JSON
# schema output format, as `outputConfig`), with `tool_choice.disable_parallel_tool_use`
NOT_ON_BEDROCK: Mapping[str, Asks] = {
    **{k: v for k, v in ANTHROPIC_ONLY.items() if k not in ("thinking", "top_k")},
    "tool_choice": _parallel_off,
}

# ... and those the bundled engine cannot: it draws its tool calls without that limit
ANTHROPIC_NOT_ON_ENGINE: Mapping[str, Asks] = {**ANTHROPIC_ONLY, "tool_choice": _parallel_off}

# the same two for the OpenAI-compatible engines that take `top_k` (`takes_top_k`)
_BUT_TOP_K: Mapping[int, Mapping[str, Asks]] = {
    id(table): {k: v for k, v in table.items() if k != "top_k"}
    for table in (ANTHROPIC_ONLY, ANTHROPIC_NOT_ON_ENGINE)
}


def _nonempty(value: JSON) -> bool:
    return bool(value)


# the Anthropic fields each OpenAI shaping field is made from, and when they ask for it (an
# Anthropic client on a LiteLLM backend whose provider lacks that OpenAI field)
_ANTHROPIC_SOURCES: Mapping[str, Mapping[str, Asks]] = {
    "tools": {"tools": _nonempty},
    "tool_choice": {"tool_choice": _anything},
    "parallel_tool_calls": {"tool_choice": _parallel_off},
    "temperature": {"temperature": _anything},
    "top_p": {"top_p": _anything},
    "stop": {"stop_sequences": _nonempty},
    "response_format": {"output_config": _anything, "output_format": _anything},
}


@functools.cache  # one table per provider's list: built at a backend's first call
def _anthropic_on_litellm(unsupported: frozenset[str]) -> Mapping[str, Asks]:
    refused = dict(ANTHROPIC_ONLY)
    for openai_field in sorted(unsupported):
        for field, asks in _ANTHROPIC_SOURCES.get(openai_field, {}).items():
            held = refused.get(field)
            refused[field] = asks if held is None else _either(held, asks)
    return refused


def _either(first: Asks, second: Asks) -> Asks:
    return lambda value: first(value) or second(value)


# the name a refusal gives a field whose offending part is nested (when only that part is)
_REPORTED = {"tool_choice": "tool_choice.disable_parallel_tool_use"}


def _refused(client: WireFormat, backend: Backend) -> Mapping[str, Asks]:
    """The fields a client of `client` may not send to `backend` (by its wire and kind); an
    Anthropic client's `top_k` goes to the OpenAI-compatible engines that take it."""
    refused = _refused_by_kind(client, backend)
    if client == "anthropic" and getattr(backend, "takes_top_k", False):
        return _BUT_TOP_K.get(id(refused), refused)
    return refused


def _refused_by_kind(client: WireFormat, backend: Backend) -> Mapping[str, Asks]:
    kind, backend_wire = backend.kind, backend.wire
    if kind == "selfhost":  # the bundled engine speaks OpenAI but ignores what it cannot do
        return NOT_ON_ENGINE if client == "openai" else ANTHROPIC_NOT_ON_ENGINE
    if kind == "litellm":  # LiteLLM takes OpenAI's shape and says what its provider supports
        unsupported: frozenset[str] = getattr(backend, "unsupported_fields", frozenset())
        if client == "anthropic":
            return _anthropic_on_litellm(unsupported) if unsupported else ANTHROPIC_ONLY
        return {f: OPENAI_ONLY.get(f, _anything) for f in unsupported}
    if backend_wire == client:
        return {}  # the same wire forwards the client's JSON
    if client == "openai":
        return OPENAI_NOT_ON_BEDROCK if kind == "bedrock" else OPENAI_NOT_ON_ANTHROPIC
    return NOT_ON_BEDROCK if kind == "bedrock" else ANTHROPIC_ONLY


# what a LiteLLM stream cannot carry though its provider takes it: the stream goes through
# canonical events, which hold one choice and no logprobs (a reply keeps them)
NOT_IN_A_LITELLM_STREAM: Mapping[str, Asks] = {
    "n": OPENAI_ONLY["n"],
    "logprobs": OPENAI_ONLY["logprobs"],
    "top_logprobs": OPENAI_ONLY["top_logprobs"],
}


def check_translatable(wire: WireFormat, body: Mapping[str, JSON], route: ModelRoute) -> None:
    """RequestRejected (400, rule `unsupported_parameter`) naming the first field that a
    backend of the route would have to drop. Every candidate is checked, fallbacks included:
    the answer must not change with the backend that happens to serve it."""
    for candidate in route.candidates:
        backend = candidate.backend
        refused = _refused(wire, backend)
        if backend.kind == "litellm" and wire == "openai" and body.get("stream") is True:
            refused = {**NOT_IN_A_LITELLM_STREAM, **refused}
        for field, asks in refused.items():
            if field in body and asks(body[field]):
                name = _REPORTED.get(field, field) if asks is _parallel_off else field
                raise RequestRejected(
                    f"{name}: backend '{candidate.backend_name}' of model '{route.name}' "
                    f"cannot honour it ({backend.kind} does not take this {wire} parameter)",
                    rule="unsupported_parameter",
                    field=name,
                )
