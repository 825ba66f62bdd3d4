"""Agents on the bundled engine through the gateway, as `make run` serves the default model: the
openai SDK's tool loop, the anthropic SDK's `tool_use` blocks (streamed too), and a pydantic-ai
agent whose structured output comes back as a forced tool call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from bench._procs import free_port
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy

pytestmark = pytest.mark.slow

KEY = "lt-acme-tools-engine-key-000000000000001"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z .'-]{1,24}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
DESCRIPTION = "Current weather in a city"
QUESTION = "What is the weather in Paris right now?"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    tmp_path = tmp_path_factory.mktemp("engine-tools")
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    backend = {
        "kind": "selfhost",
        "name": "smollm2-local",
        "model_path": "default",
        "port": free_port(),
        "timeout_s": 120,
    }
    models = [{"name": "smollm2", "backends": [backend]}]
    prices = {"smollm2": {"input": 0.02, "output": 0.04}}
    gw = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices))
    yield gw
    gw.stop()


def test_openai_sdk_completes_a_tool_loop(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0, timeout=120)
    tools: Any = [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": DESCRIPTION, "parameters": WEATHER},
        }
    ]
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(
        model="smollm2",
        messages=messages,
        tools=tools,
        tool_choice="required",
        max_tokens=48,
        temperature=0,
    )
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear", "temp_c": 21}'},
    ]
    final = client.chat.completions.create(
        model="smollm2",
        messages=messages,
        tools=tools,
        tool_choice="none",
        max_tokens=24,
        temperature=0,
    )
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content
    assert final.choices[0].finish_reason in ("stop", "length")


def _anthropic_tools() -> Any:
    return [{"name": "get_weather", "description": DESCRIPTION, "input_schema": WEATHER}]


def test_anthropic_sdk_gets_tool_use_blocks_streamed_and_not(gateway: RunningGateway) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=120)
    request: Any = {
        "model": "smollm2",
        "max_tokens": 48,
        "extra_body": {"temperature": 0},  # this SDK version has no `temperature` argument
        "tools": _anthropic_tools(),
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": QUESTION}],
    }
    reply = client.messages.create(**request)
    assert reply.stop_reason == "tool_use"
    [block] = [b for b in reply.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.id
    jsonschema.validate(block.input, WEATHER)
    with client.messages.stream(**request) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(partial) == block.input
    assert streamed.stop_reason == "tool_use"
    [streamed_block] = [b for b in streamed.content if b.type == "tool_use"]
    assert streamed_block.input == block.input
    result: Any = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "clear, 21 C"}],
        },
    ]
    final = client.messages.create(
        **{**request, "tool_choice": {"type": "none"}, "messages": result}
    )
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in final.content] == ["text"]


def test_an_anthropic_top_k_reaches_the_engine(gateway: RunningGateway) -> None:
    """top_k 1 at temperature 1 samples the greedy answer every time: the engine honoured it
    (dropped on the way, three hot samples of 16 tokens would not all be the greedy text)."""
    client = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=120)
    ask: Any = {
        "model": "smollm2",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Write one line about the sea."}],
    }
    greedy = client.messages.create(**ask, extra_body={"temperature": 0})
    for _ in range(3):
        hot = client.messages.create(**ask, extra_body={"temperature": 1.0, "top_k": 1})
        assert hot.content == greedy.content


def test_an_anthropic_structured_output_is_json_of_its_schema(gateway: RunningGateway) -> None:
    """`output_config.format` (Anthropic's structured outputs) reaches the engine as its
    `response_format`: the reply's text is JSON that the schema accepts."""
    client = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=120)
    reply = client.messages.create(
        model="smollm2",
        max_tokens=64,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": WEATHER}}},
    )
    [block] = reply.content
    assert block.type == "text"
    jsonschema.validate(json.loads(block.text), WEATHER)


def test_pydantic_ai_agent_gets_structured_output(gateway: RunningGateway) -> None:
    from pydantic import BaseModel, Field
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    class Weather(BaseModel):
        city: str = Field(pattern="^[A-Za-z .'-]{1,24}$")
        unit: str = Field(pattern="^(celsius|fahrenheit)$")

    provider = OpenAIProvider(base_url=f"{gateway.url}/v1", api_key=KEY)
    agent = Agent(OpenAIChatModel("smollm2", provider=provider), output_type=Weather)

    result = agent.run_sync(QUESTION, model_settings={"temperature": 0, "max_tokens": 48})
    assert isinstance(result.output, Weather)
    assert result.output.unit in ("celsius", "fahrenheit")
    # the output came back as a call of pydantic-ai's output tool, forced with tool_choice
    calls = [p for m in result.all_messages() for p in m.parts if p.part_kind == "tool-call"]
    assert [c.tool_name for c in calls] == ["final_result"]
    assert Weather.model_validate(calls[0].args_as_dict()) == result.output
