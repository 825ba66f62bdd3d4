"""Every documented OpenAI chat and Anthropic Messages parameter, on every backend that
translates it: honoured, or refused with a 400 naming it; never dropped on the way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping

import httpx
import pytest

from adapters.backends import BackendSpec, build_backend
from adapters.backends.bedrock import encode_converse
from adapters.http.upstream import HttpxPool
from adapters.types import JSON, WireFormat
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from gateway.core.translation import check_translatable
from gateway.errors import RequestRejected
from gateway.ports import Candidate, ModelRoute

# OpenAI's chat-completions parameters (API reference), each with a value that asks for
# something; the neutral values (`n: 1`, ...) are checked apart
OPENAI_ASKING: Mapping[str, JSON] = {
    "audio": {"voice": "alloy", "format": "wav"},
    "frequency_penalty": 0.5,
    "function_call": "auto",
    "functions": [{"name": "f", "parameters": {}}],
    "logit_bias": {"50256": -100},
    "logprobs": True,
    "metadata": {"k": "v"},
    "modalities": ["text", "audio"],
    "n": 2,
    "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "x"},
    "presence_penalty": 0.5,
    "prompt_cache_retention": "24h",
    "reasoning_effort": "high",
    "response_format": {"type": "json_object"},
    "seed": 7,
    "service_tier": "flex",
    "store": True,
    "top_logprobs": 2,
    "verbosity": "low",
    "web_search_options": {},
}
# ... and those every translated backend honours (through the canonical request or the gateway)
OPENAI_HONOURED = [
    "messages",
    "model",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "user",
    "safety_identifier",
    "prompt_cache_key",
]
ENGINE_HONOURS = {
    "seed",
    "logprobs",
    "top_logprobs",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
}

ANTHROPIC_ASKING: Mapping[str, JSON] = {
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "top_k": 5,
    "container": "c-1",
    "mcp_servers": [{"type": "url", "url": "https://mcp", "name": "m"}],
    "context_management": {"edits": []},
    "service_tier": "standard_only",
    "output_format": {"type": "json_schema", "schema": {}},
    "output_config": {"effort": "low"},
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
}
# Converse's additionalModelRequestFields; the engine's sampling extension
# (a JSON schema output format as `response_format` on an OpenAI-style upstream)
HONOURED_ANTHROPIC = {
    "bedrock": {"thinking", "top_k", "output_format"},
    "selfhost": {"top_k", "output_format"},
    "openai_compatible": {"output_format"},
}


@pytest.fixture
def routes() -> Iterator[dict[str, ModelRoute]]:
    """One single-backend route per kind, the backends built as the gateway builds them."""
    client = httpx.AsyncClient()
    pool = HttpxPool(client)
    specs = {
        "anthropic": BackendSpec("claude", "anthropic", "http://127.0.0.1:9", model="c"),
        "bedrock": BackendSpec("br", "bedrock", model="anthropic.claude-sonnet-4-5-v1:0"),
        "selfhost": BackendSpec("engine", "selfhost", "http://127.0.0.1:9/v1", model="s"),
        "openai_compatible": BackendSpec(
            "oai", "openai_compatible", "http://127.0.0.1:9/v1", model="o"
        ),
    }
    yield {
        kind: ModelRoute("m", (Candidate(build_backend(spec, http=pool), spec.name, "api"),))
        for kind, spec in specs.items()
    }
    asyncio.run(client.aclose())


def refused(wire: WireFormat, body: Mapping[str, JSON], route: ModelRoute) -> str | None:
    try:
        check_translatable(wire, body, route)
    except RequestRejected as exc:
        assert exc.rule == "unsupported_parameter"
        return exc.field
    return None


@pytest.mark.parametrize("kind", ["anthropic", "bedrock", "selfhost"])
@pytest.mark.parametrize("field", sorted(OPENAI_ASKING))
def test_openai_parameters_are_refused_by_name_where_not_honoured(
    routes: dict[str, ModelRoute], kind: str, field: str
) -> None:
    body = {"model": "m", "messages": [], "stream": True, field: OPENAI_ASKING[field]}
    honoured = (kind == "selfhost" and field in ENGINE_HONOURS) or (
        kind == "anthropic" and field == "parallel_tool_calls"  # as disable_parallel_tool_use
    )
    assert refused("openai", body, routes[kind]) == (None if honoured else field)


@pytest.mark.parametrize(
    ("engine", "honoured"), [("vllm", True), ("sglang", True), ("other", False)]
)
def test_an_anthropic_top_k_is_honoured_by_the_declared_engines_that_take_it(
    engine: str, honoured: bool
) -> None:
    spec = BackendSpec(
        "srv", "openai_compatible", "http://127.0.0.1:9/v1", extra={"engine": engine}
    )
    client = httpx.AsyncClient()
    route = ModelRoute("m", (Candidate(build_backend(spec, http=HttpxPool(client)), "srv", "api"),))
    body = {"model": "m", "messages": [], "top_k": 5}
    assert refused("anthropic", body, route) == (None if honoured else "top_k")
    asyncio.run(client.aclose())


@pytest.mark.parametrize("kind", ["anthropic", "bedrock", "selfhost"])
def test_neutral_and_honoured_openai_values_pass(routes: dict[str, ModelRoute], kind: str) -> None:
    neutral = {"n": 1, "logprobs": False, "parallel_tool_calls": True, "store": False}
    honoured = {f: "x" for f in OPENAI_HONOURED}
    body = {**honoured, **neutral, "service_tier": "auto", "presence_penalty": 0}
    assert refused("openai", body, routes[kind]) is None


@pytest.mark.parametrize("kind", ["openai_compatible", "bedrock", "selfhost"])
@pytest.mark.parametrize("field", sorted(ANTHROPIC_ASKING))
def test_anthropic_parameters_are_refused_by_name_where_not_honoured(
    routes: dict[str, ModelRoute], kind: str, field: str
) -> None:
    body = {"model": "m", "messages": [], field: ANTHROPIC_ASKING[field]}
    if field in HONOURED_ANTHROPIC.get(kind, set()):
        expected = None
    elif field == "tool_choice":
        # an OpenAI-compatible upstream takes it as `parallel_tool_calls: false`
        expected = None if kind == "openai_compatible" else "tool_choice.disable_parallel_tool_use"
    else:
        expected = field
    assert refused("anthropic", body, routes[kind]) == expected


def test_the_same_wire_forwards_everything(routes: dict[str, ModelRoute]) -> None:
    assert refused("openai", dict(OPENAI_ASKING), routes["openai_compatible"]) is None
    assert refused("anthropic", dict(ANTHROPIC_ASKING), routes["anthropic"]) is None


def test_what_translation_honours_reaches_the_upstream() -> None:
    """`disable_parallel_tool_use` as `parallel_tool_calls: false`; `safety_identifier` as the
    end-user id; the end-user id on Bedrock as `requestMetadata`."""
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": tools,
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "metadata": {"user_id": "u-1"},
    }
    request = anthropic_wire.decode_request(body)
    assert openai_wire.encode_request(request)["parallel_tool_calls"] is False
    converse = encode_converse("br", "model-id", request, cache_points=False)
    assert converse["requestMetadata"] == {"user_id": "u-1"}
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    by_safety_id = openai_wire.decode_request({**chat, "safety_identifier": "s-1"})
    assert anthropic_wire.encode_request(by_safety_id)["metadata"] == {"user_id": "s-1"}


@pytest.mark.parametrize(
    ("tool_choice", "sent"),
    [
        (None, {"type": "auto", "disable_parallel_tool_use": True}),
        ("auto", {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", {"type": "any", "disable_parallel_tool_use": True}),
        (
            {"type": "function", "function": {"name": "f"}},
            {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        ),
        ("none", {"type": "none"}),  # no tool call at all: nothing to limit
    ],
)
def test_parallel_tool_calls_false_reaches_anthropic_as_one_tool_call_at_most(
    tool_choice: JSON, sent: JSON
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    if tool_choice is not None:
        chat["tool_choice"] = tool_choice
    request = openai_wire.decode_request({**chat, "parallel_tool_calls": False})
    assert anthropic_wire.encode_request(request)["tool_choice"] == sent
    plain = anthropic_wire.encode_request(openai_wire.decode_request(chat)).get("tool_choice")
    assert plain is None or "disable_parallel_tool_use" not in plain  # only when asked


def litellm_route(model: str) -> ModelRoute:
    spec = BackendSpec("ll", "litellm", model=model)
    backend = build_backend(spec, http=HttpxPool(httpx.AsyncClient()))  # LiteLLM uses its own
    return ModelRoute("m", (Candidate(backend, spec.name, "api"),))


@pytest.mark.parametrize("field", ["n", "seed", "logprobs", "top_logprobs", "logit_bias"])
def test_litellm_refuses_what_its_provider_does_not_take(field: str) -> None:
    # LiteLLM would drop these for Anthropic (drop_params); its own list says so, the gateway
    # refuses them by name instead
    body = {"model": "m", "messages": [], field: OPENAI_ASKING.get(field, 3)}
    assert refused("openai", body, litellm_route("anthropic/claude-sonnet-4-5")) == field
    assert refused("openai", body, litellm_route("openai/gpt-4o-mini")) is None


@pytest.mark.parametrize(("field", "value"), [("n", 2), ("logprobs", True), ("top_logprobs", 2)])
def test_litellm_refuses_in_a_stream_what_its_streams_cannot_carry(field: str, value: JSON) -> None:
    """A LiteLLM stream goes through canonical events, which hold one choice and no logprobs:
    its provider takes the field (a reply carries it), a stream would lose it."""
    route = litellm_route("openai/gpt-4o-mini")
    body = {"model": "m", "messages": [], field: value}
    assert refused("openai", body, route) is None
    assert refused("openai", {**body, "stream": True}, route) == field
    neutral = {"model": "m", "messages": [], "stream": True, "n": 1, "logprobs": False}
    assert refused("openai", neutral, route) is None


def test_litellm_passes_what_its_provider_takes_and_what_only_describes_the_call() -> None:
    route = litellm_route("anthropic/claude-sonnet-4-5")
    body = {
        "model": "m",
        "messages": [],
        "temperature": 0.2,
        "stop": ["x"],
        "response_format": {"type": "json_object"},
        "tools": [],
        "user": "u1",
        "metadata": {"k": "v"},
        "prompt_cache_key": "p",
        "safety_identifier": "s",
        "n": 1,
    }
    assert refused("openai", body, route) is None


def test_an_anthropic_client_through_litellm_keeps_no_field_silently() -> None:
    body = {"model": "m", "messages": [], "top_k": 5}
    assert refused("anthropic", body, litellm_route("anthropic/claude-sonnet-4-5")) == "top_k"


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


@pytest.mark.parametrize(
    ("response_format", "on_anthropic"),
    [
        ({"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER_SCHEMA}}, True),
        ({"type": "json_schema", "json_schema": {"name": "w"}}, False),  # no schema to give
        ({"type": "json_object"}, False),  # JSON mode: Anthropic has none
        ({"type": "text"}, True),
    ],
)
def test_a_json_schema_response_format_reaches_anthropic_as_its_output_format(
    routes: dict[str, ModelRoute], response_format: JSON, on_anthropic: bool
) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body = {**chat, "response_format": response_format}
    assert refused("openai", body, routes["anthropic"]) == (
        None if on_anthropic else "response_format"
    )
    assert refused("openai", body, routes["bedrock"]) == refused(
        "openai", body, routes["anthropic"]
    )
    request = openai_wire.decode_request(body)
    sent = anthropic_wire.encode_request(request).get("output_config")
    converse = encode_converse("br", "model-id", request, cache_points=False).get("outputConfig")
    if on_anthropic and response_format != {"type": "text"}:
        assert sent == {"format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}
        definition = {"schema": json.dumps(WEATHER_SCHEMA), "name": "w"}
        assert converse == {
            "textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}
        }
    else:
        assert sent is None and converse is None


@pytest.mark.parametrize(
    ("fields", "translated"),
    [
        ({"output_config": {"format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}}, True),
        ({"output_format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}, True),
        ({"output_config": {"format": {"type": "json_schema"}}}, False),  # no schema
        ({"output_config": {"effort": "low", "format": {"type": "json_schema"}}}, False),
    ],
)
def test_an_anthropic_json_schema_output_reaches_openai_upstreams_as_response_format(
    routes: dict[str, ModelRoute], fields: dict[str, JSON], translated: bool
) -> None:
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    body |= fields
    (field,) = fields
    for kind in ("openai_compatible", "selfhost", "bedrock"):
        assert refused("anthropic", body, routes[kind]) == (None if translated else field)
    sent = openai_wire.encode_request(anthropic_wire.decode_request(body))
    expected = {"type": "json_schema", "json_schema": {"name": "output", "schema": WEATHER_SCHEMA}}
    assert sent.get("response_format") == (expected if translated else None)


def test_litellm_takes_an_anthropic_output_format_only_where_its_provider_takes_one() -> None:
    output = {"format": {"type": "json_schema", "schema": WEATHER_SCHEMA}}
    body = {"model": "m", "max_tokens": 9, "messages": [], "output_config": output}
    assert refused("anthropic", body, litellm_route("openai/gpt-4o-mini")) is None
    # LiteLLM would drop `response_format` for Cohere: refused by name instead
    assert refused("anthropic", body, litellm_route("cohere/command-r")) == "output_config"


@pytest.mark.parametrize(
    ("fields", "reported"),
    [
        ({"tools": [{"name": "f", "input_schema": {"type": "object"}}]}, "tools"),
        ({"tool_choice": {"type": "auto"}}, "tool_choice"),
        ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, "tool_choice"),
        ({"tools": []}, None),  # nothing asked
    ],
)
def test_litellm_refuses_the_anthropic_fields_its_provider_cannot_take(
    fields: dict[str, JSON], reported: str | None
) -> None:
    """LiteLLM would drop `tools`, `tool_choice` and `parallel_tool_calls` for Ollama: the
    Anthropic fields they come from are refused by name instead; OpenAI itself takes them."""
    body = {"model": "m", "max_tokens": 9, "messages": []} | fields
    assert refused("anthropic", body, litellm_route("ollama/llama3")) == reported
    assert refused("anthropic", body, litellm_route("openai/gpt-4o-mini")) is None
