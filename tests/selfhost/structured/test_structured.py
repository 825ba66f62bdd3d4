"""Tools and structured output in the bundled engine, through its server and the `openai` SDK:
forced calls and JSON-schema replies that always validate (greedy and sampled, batched together),
streamed arguments equal to non-streamed ones, a tool loop that hits the prefix cache, and a 400
naming the field for what the grammar library cannot express."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from selfhost.engine.llm_engine import LLMEngine
from selfhost.structured.chat_plan import plan_chat
from selfhost.structured.tool_format import call_text
from tests.selfhost.serving import serving

MODEL = "smollm2-test"
BLOCK_SIZE = 16
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Za-z .'-]{1,24}$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "pattern": "^[A-Za-z/_+0-9-]{1,32}$"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": WEATHER,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time in a timezone",
            "parameters": TIME,
        },
    },
]
ANSWER = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "pattern": "^[A-Za-z0-9 ,.'-]{1,32}$"},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}
ANSWER_FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Perth", "Seoul", "Dakar", "Rome"]
QUESTIONS = [f"What will the weather be in {city} this week?" for city in CITIES] + [
    f"Should I take an umbrella in {city} tomorrow?" for city in CITIES
]
SEEDS = range(20)


@pytest.fixture(scope="module")
def engine(make_engine: Callable[..., LLMEngine]) -> LLMEngine:
    return make_engine(num_blocks=512, max_num_seqs=32)


@pytest.fixture(scope="module")
def base_url(engine: LLMEngine) -> Iterator[str]:
    with serving(engine, MODEL) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=300, max_retries=0)


def _ask(question: str) -> list[Any]:
    return [{"role": "user", "content": question}]


def _together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Send the requests at once, so the engine decodes them in one continuous batch."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def _forced_call(client: openai.OpenAI, question: str, **sampling: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL,
        messages=_ask(question),
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        **sampling,
    )


def test_forced_tool_call_validates_greedy_and_sampled(client: openai.OpenAI) -> None:
    greedy = [lambda q=q: _forced_call(client, q, temperature=0) for q in QUESTIONS]
    sampled = [
        lambda s=s: _forced_call(client, QUESTIONS[0], temperature=1.0, seed=s) for s in SEEDS
    ]
    replies = _together(greedy + sampled)
    for reply in replies:
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        [call] = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    greedy_args = [
        json.loads(r.choices[0].message.tool_calls[0].function.arguments) for r in replies[:20]
    ]
    assert greedy_args[0]["city"] == "Paris"
    sampled_args = {r.choices[0].message.tool_calls[0].function.arguments for r in replies[20:]}
    assert len(sampled_args) > 1  # the seeds really sampled


def test_required_picks_one_of_the_tools(client: openai.OpenAI) -> None:
    replies = _together(
        [
            lambda s=s: client.chat.completions.create(
                model=MODEL,
                messages=_ask("What time is it in Tokyo?"),
                tools=TOOLS,
                tool_choice="required",
                max_tokens=48,
                temperature=1.0,
                seed=s,
            )
            for s in range(8)
        ]
    )
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    for reply in replies:
        [call] = reply.choices[0].message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        assert reply.choices[0].finish_reason == "tool_calls"


def _json_reply(client: openai.OpenAI, question: str, **sampling: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL,
        messages=_ask(question),
        response_format=ANSWER_FORMAT,
        max_tokens=64,
        **sampling,
    )


def test_json_schema_reply_validates_greedy_and_sampled(client: openai.OpenAI) -> None:
    greedy = [lambda q=q: _json_reply(client, q, temperature=0) for q in QUESTIONS]
    sampled = [
        lambda s=s: _json_reply(client, QUESTIONS[3], temperature=1.0, seed=s) for s in SEEDS
    ]
    replies = _together(greedy + sampled)
    for reply in replies:
        assert reply.choices[0].finish_reason == "stop", reply.choices[0].message.content
        assert reply.choices[0].message.tool_calls is None
        jsonschema.validate(json.loads(reply.choices[0].message.content), ANSWER)
    assert len({r.choices[0].message.content for r in replies[20:]}) > 1


def test_json_object_reply_is_an_object(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=_ask("Describe Paris as JSON with a name and a country."),
        response_format={"type": "json_object"},
        max_tokens=64,
        temperature=0,
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 7}])
def test_streamed_argument_deltas_concatenate_to_the_arguments(
    client: openai.OpenAI, sampling: dict[str, Any]
) -> None:
    whole = _forced_call(client, QUESTIONS[1], **sampling)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=_ask(QUESTIONS[1]),
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        stream=True,
        **sampling,
    )
    chunks = [c for c in stream if c.choices]
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert deltas[0].function.name == "get_weather" and deltas[0].id.startswith("call_")
    assert all(d.index == 0 and d.function.name is None for d in deltas[1:])
    pieces = [d.function.arguments for d in deltas]
    assert len(pieces) > 5  # the arguments arrive as they are generated, not in one piece
    assert "".join(pieces) == whole.choices[0].message.tool_calls[0].function.arguments
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert all(not c.choices[0].delta.content for c in chunks)


def _metric(base_url: str, name: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    line = next(row for row in text.splitlines() if row.startswith(f"selfhost_{name}{{"))
    return float(line.rsplit(" ", 1)[1])


def _prompt_ids(engine: LLMEngine, messages: list[Any]) -> list[int]:
    plan = plan_chat(messages, TOOLS, "auto", None, engine.tokenizer.renders_tools)
    return engine.tokenizer.encode(engine.tokenizer.render_chat(plan.messages, plan.tools))


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_three_turn_tool_loop_hits_the_prefix_cache(
    client: openai.OpenAI, base_url: str, engine: LLMEngine
) -> None:
    """Turns 2 and 3 find every full block of the previous turn's prompt and generated call in the
    cache: the call and its result render exactly as the model wrote and read them."""
    messages = _ask("I fly to Oslo tomorrow: what is the weather there, and the time now?")
    choices: list[Any] = [
        {"type": "function", "function": {"name": "get_weather"}},
        {"type": "function", "function": {"name": "get_time"}},
        "auto",
    ]
    results = ['{"forecast": "snow", "high_c": -3}', '{"time": "09:41"}']
    computed: list[int] = []  # the tokens the engine computed for the previous turn
    for turn, choice in enumerate(choices):
        prompt = _prompt_ids(engine, messages)
        hits_before = _metric(base_url, "prefix_cache_hits_total")
        reply = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=64,
            temperature=0,
        )
        assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
        cached = reply.usage.prompt_tokens_details.cached_tokens
        assert _metric(base_url, "prefix_cache_hits_total") - hits_before == cached
        if turn > 0:
            shared = min(_common_prefix(prompt, computed), len(prompt) - 1)
            assert shared == len(computed)  # the new prompt extends the previous turn's tokens
            assert cached == shared // BLOCK_SIZE * BLOCK_SIZE
        if turn == 2:
            break
        [call] = reply.choices[0].message.tool_calls
        generated = engine.tokenizer.encode(call_text(call.function.name, call.function.arguments))
        assert reply.usage.completion_tokens == len(generated) + 1  # and the end-of-turn token
        computed = prompt + generated
        messages = messages + [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": results[turn]},
        ]


def _rejected(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    return dict(response.json()["error"])


def test_what_the_grammar_cannot_express_is_a_400_naming_the_field(
    client: openai.OpenAI, base_url: str
) -> None:
    unique = {
        "type": "json_schema",
        "json_schema": {"name": "u", "schema": {"type": "array", "uniqueItems": True}},
    }
    error = _rejected(base_url, {"messages": _ask("hi"), "response_format": unique})
    assert error["param"] == "response_format.json_schema.schema"
    assert error["type"] == "invalid_request_error"
    assert "uniqueItems" in error["message"]
    negated = {
        **TOOLS[1],
        "function": {
            **TOOLS[1]["function"],
            "parameters": {"type": "object", "not": {"required": ["x"]}},
        },
    }
    body = {"messages": _ask("hi"), "tools": [TOOLS[0], negated], "tool_choice": "required"}
    error = _rejected(base_url, body)
    assert error["param"] == "tools[1].function.parameters"
    assert "not" in error["message"]
    named = {"type": "function", "function": {"name": "send_email"}}
    error = _rejected(base_url, {"messages": _ask("hi"), "tools": TOOLS, "tool_choice": named})
    assert error["param"] == "tool_choice.function.name"
    error = _rejected(base_url, {"messages": _ask("hi"), "tool_choice": "required"})
    assert error["param"] == "tool_choice"
    both = {
        "messages": _ask("hi"),
        "tools": TOOLS,
        "tool_choice": "required",
        "response_format": ANSWER_FORMAT,
    }
    assert _rejected(base_url, both)["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=_ask("hi"), response_format=unique)
    assert caught.value.param == "response_format.json_schema.schema"


def test_tool_choice_none_renders_no_tools_and_auto_leaves_the_model_free(
    client: openai.OpenAI,
) -> None:
    def usage(**extra: Any) -> Any:
        reply = client.chat.completions.create(
            model=MODEL, messages=_ask("Hello!"), max_tokens=1, temperature=0, **extra
        )
        return reply.usage

    plain, none, auto = usage(), usage(tools=TOOLS, tool_choice="none"), usage(tools=TOOLS)
    assert none.prompt_tokens == plain.prompt_tokens
    assert (
        auto.prompt_tokens > plain.prompt_tokens + 100
    )  # both tools' signatures are in the prompt
