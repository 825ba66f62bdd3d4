"""Every sampling option in one continuous batch, at bf16 and fp32: guided rows (a forced tool call,
`json_object`) beside free rows with penalties, logit bias, top-k/p, seeds, logprobs and stop
strings. Every row finishes, and the guided ones parse."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from selfhost.engine.llm_engine import LLMEngine, RequestOutput
from selfhost.engine.sequence import SamplingParams
from selfhost.structured.chat_plan import compile_guide, plan_chat
from selfhost.structured.grammar import GrammarCompiler, Guide
from selfhost.structured.tool_parser import ToolCallParser

MAX_TOKENS = 24
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
QUESTION = [{"role": "user", "content": "What is the weather in Oslo?"}]

# (request id, tool_choice, response_format, sampling)
CASES: list[tuple[str, Any, Any, SamplingParams]] = [
    ("tool-greedy", FORCED, None, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)),
    (
        "tool-sampled",
        "required",
        None,
        SamplingParams(temperature=1.0, seed=3, top_p=0.9, max_tokens=MAX_TOKENS),
    ),
    (
        "object-penalised",
        None,
        {"type": "json_object"},
        SamplingParams(
            temperature=0.0, frequency_penalty=0.5, presence_penalty=0.5, max_tokens=MAX_TOKENS
        ),
    ),
    (
        "object-biased",
        None,
        {"type": "json_object"},
        SamplingParams(temperature=0.8, seed=5, logit_bias=((1, -5.0),), max_tokens=MAX_TOKENS),
    ),
    ("free-greedy", None, None, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)),
    (
        "free-penalised",
        None,
        None,
        SamplingParams(
            temperature=1.0, seed=1, frequency_penalty=1.0, presence_penalty=0.5, max_tokens=8
        ),
    ),
    (
        "free-biased",
        None,
        None,
        SamplingParams(temperature=0.0, logit_bias=((28, 5.0), (17, -100.0)), max_tokens=8),
    ),
    (
        "free-filtered",
        None,
        None,
        SamplingParams(temperature=0.7, top_k=20, top_p=0.8, seed=2, logprobs=3, max_tokens=8),
    ),
    ("free-stop", None, None, SamplingParams(temperature=0.0, stop=("e",), max_tokens=8)),
]


def _add(engine: LLMEngine, grammars: GrammarCompiler) -> dict[str, bool]:
    """Adds every case; returns which ones parse tool calls."""
    calls: dict[str, bool] = {}
    for request_id, choice, response_format, params in CASES:
        tools = TOOLS if choice is not None else []
        plan = plan_chat(QUESTION, tools, choice, response_format, engine.tokenizer.renders_tools)
        prompt = engine.tokenizer.encode(engine.tokenizer.render_chat(plan.messages, plan.tools))
        guide: Guide | None = compile_guide(grammars, plan)
        engine.add_request(request_id, prompt, params, guide=guide)
        calls[request_id] = plan.parses_calls and plan.grammar is not None
    return calls


def _run(engine: LLMEngine, guided: set[str]) -> dict[str, list[RequestOutput]]:
    """Steps to the end; asserts that some step sampled guided and free rows together."""
    outputs: dict[str, list[RequestOutput]] = {}
    mixed = False
    while engine.has_unfinished():
        step = engine.step()
        rows = {out.request_id in guided for out in step}
        mixed = mixed or rows == {True, False}
        for out in step:
            outputs.setdefault(out.request_id, []).append(out)
    assert mixed
    return outputs


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_sampling_option_in_one_batch(
    make_engine: Callable[..., LLMEngine], dtype: str
) -> None:
    engine = make_engine(dtype=dtype, num_blocks=256, max_num_batched_tokens=4096, chunk_size=4096)
    tokenizer = engine.tokenizer
    grammars = GrammarCompiler(tokenizer.tokenizer.to_str(), tokenizer.eos_token_ids)
    calls = _add(engine, grammars)
    guided = {request_id for request_id, _, _, _ in CASES if not request_id.startswith("free")}
    outputs = _run(engine, guided)
    assert sorted(outputs) == sorted(calls)
    for request_id, steps in outputs.items():
        last = steps[-1]
        assert last.finished and last.error is None, (request_id, last.error)
        text = "".join(out.new_text for out in steps)
        if calls[request_id]:
            parser = ToolCallParser()
            parser.feed(text)
            parser.finish()
            if last.finish_reason == "stop":
                [call] = parser.calls
                assert call.name == "get_weather"
                assert isinstance(json.loads(call.arguments), dict)
        elif request_id.startswith("object") and last.finish_reason == "stop":
            assert isinstance(json.loads(text), dict)
    assert all(len(lp.top) == 3 for out in outputs["free-filtered"] for lp in out.logprobs)
    assert "e" not in "".join(out.new_text for out in outputs["free-stop"])
