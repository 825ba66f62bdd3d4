"""A property fuzz over JSON schemas (fixed seed): forced tool calls, `json_schema` and `json_object`
replies on small budgets, sampled, in one batch. Every reply that ends `tool_calls` or `stop`
carries JSON that parses and validates; the budget reserve closes the structure before
`max_tokens`; a reply cut at `length` claims no tool call."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest

from selfhost.engine.llm_engine import LLMEngine
from tests.selfhost.serving import serving

MODEL = "smollm2-fuzz"
SEED = 39
NUM_TOOL_CASES = 8
NUM_SCHEMA_CASES = 2
NUM_OBJECT_CASES = 2
MAX_TOKENS = 48
WORDS = ['say "hi"', "back\\slash", "tab\there", "plain", "naïve", 'a "b" \\ c']
KEYS = ["city", "note", 'he said "x"', "k\\v", "days", "tags"]


def _schema(rng: random.Random, depth: int) -> dict[str, Any]:
    kinds = ["string", "enum", "integer", "boolean"] + (["array", "object"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(2, 10)}
    if kind == "enum":
        return {"enum": rng.sample(WORDS, 2)}
    if kind in ("integer", "boolean"):
        return {"type": kind}
    if kind == "array":
        return {"type": "array", "items": _schema(rng, depth + 1), "maxItems": 2}
    return _object(rng, depth + 1)


def _object(rng: random.Random, depth: int) -> dict[str, Any]:
    keys = rng.sample(KEYS, rng.randint(1, 3))
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {key: _schema(rng, depth) for key in keys},
        "required": keys[: rng.randint(0, 1)],
    }
    extra = rng.choice([None, True, False])
    if extra is not None:
        schema["additionalProperties"] = extra
    return schema


@pytest.fixture(scope="module")
def client(make_engine: Callable[..., LLMEngine]) -> Iterator[openai.OpenAI]:
    engine = make_engine(num_blocks=256, max_num_seqs=16, max_num_batched_tokens=2048)
    with serving(engine, MODEL) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300, max_retries=0)


def _requests(rng: random.Random) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request body, the schema its JSON must validate against)."""
    ask = [{"role": "user", "content": "Fill in the details for a trip to Oslo."}]
    cases = []
    for i in range(NUM_TOOL_CASES):
        schema = _object(rng, 1)
        tool = {"type": "function", "function": {"name": f"tool_{i}", "parameters": schema}}
        choice = {"type": "function", "function": {"name": f"tool_{i}"}}
        cases.append(({"messages": ask, "tools": [tool], "tool_choice": choice}, schema))
    for _ in range(NUM_SCHEMA_CASES):
        schema = _object(rng, 1)
        fmt = {"type": "json_schema", "json_schema": {"name": "trip", "schema": schema}}
        cases.append(({"messages": ask, "response_format": fmt}, schema))
    for _ in range(NUM_OBJECT_CASES):
        cases.append(({"messages": ask, "response_format": {"type": "json_object"}}, {}))
    return cases


def test_every_finished_reply_parses_and_validates(client: openai.OpenAI) -> None:
    rng = random.Random(SEED)
    cases = _requests(rng)

    def send(index: int) -> Any:
        body = cases[index][0]
        return client.chat.completions.create(
            model=MODEL, max_tokens=MAX_TOKENS, temperature=1.0, seed=SEED + index, **body
        )

    with ThreadPoolExecutor(len(cases)) as pool:
        replies = list(pool.map(send, range(len(cases))))
    reasons = []
    for (body, schema), reply in zip(cases, replies, strict=True):
        choice = reply.choices[0]
        reasons.append(choice.finish_reason)
        if choice.finish_reason == "length":
            assert choice.message.tool_calls is None
            continue
        if "tools" in body:
            assert choice.finish_reason == "tool_calls"
            [call] = choice.message.tool_calls
            jsonschema.validate(json.loads(call.function.arguments), schema)
        else:
            assert choice.finish_reason == "stop"
            value = json.loads(choice.message.content or "")
            assert isinstance(value, dict)
            jsonschema.validate(value, schema)
    assert "length" not in reasons, reasons  # the reserve closed every one in its budget
