"""openai-agents, with its default model (the Responses API), runs a tool loop through a running
gateway against the chat-completions fake and the Anthropic Messages fake, streaming and not;
the ledger holds one row per model call with the upstream's usage to the token."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from sqlalchemy import create_engine, text

from adapters.tokens import TokenCounter
from tests.e2e.conftest import ACME_KEY
from tests.e2e.harness import RunningGateway
from tests.fakes.upstream import FakeUpstream

MODELS = ["gpt-4o-mini", "claude-sonnet-4-5"]


@function_tool
def get_weather(text: str) -> str:
    """Weather for the place named in `text` (the fake upstream's tool calls pass `text`)."""
    return "sunny in Paris" if "Paris" in text else "unknown"


def _ledger_rows(gw: RunningGateway, expected: int) -> list[dict[str, Any]]:
    engine = create_engine(gw.settings.database_url)
    deadline = time.monotonic() + 10
    while True:
        with engine.connect() as conn:
            query = text("SELECT * FROM usage ORDER BY ts")
            rows = [dict(r._mapping) for r in conn.execute(query)]
        if len(rows) >= expected or time.monotonic() > deadline:
            engine.dispose()
            return rows
        time.sleep(0.1)


async def _run(gw: RunningGateway, model: str, *, stream: bool) -> Any:
    set_tracing_disabled(True)  # no trace export: nothing may leave the machine
    client = AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=ACME_KEY, max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=model, openai_client=client),
    )
    prompt = "call:get_weather for Paris"
    config = RunConfig(tracing_disabled=True)
    if not stream:
        return await Runner.run(agent, prompt, run_config=config)
    result = Runner.run_streamed(agent, prompt, run_config=config)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("model", MODELS)
def test_tool_loop_through_the_responses_door(
    gateway: RunningGateway, upstream: FakeUpstream, model: str, stream: bool
) -> None:
    result = asyncio.run(_run(gateway, model, stream=stream))
    # the model asked for the tool, the agent ran it and sent its output back, the model answered
    assert result.final_output == "The quick brown fox jumps over the lazy dog"
    tool_outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert [i.output for i in tool_outputs] == ["sunny in Paris"]
    second = upstream.requests[-1].body.decode()
    assert "sunny in Paris" in second and "call:get_weather for Paris" in second
    # one ledger row per model call, each with exactly the usage the upstream reported
    rows = _ledger_rows(gateway, 2)
    assert len(rows) == len(result.raw_responses) == 2
    for row, raw in zip(rows, result.raw_responses, strict=True):
        assert (row["door"], row["model"], row["status"]) == ("responses", model, "ok")
        prompt = row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
        assert (prompt, row["output_tokens"]) == (raw.usage.input_tokens, raw.usage.output_tokens)
        assert raw.usage.input_tokens_details.cached_tokens == row["cache_read_tokens"]
    assert rows[0]["output_tokens"] == upstream_tool_call_tokens(model)


def upstream_tool_call_tokens(model: str) -> int:
    """What the fake bills for its tool call: the tool's name plus its arguments' JSON."""
    counter = TokenCounter()
    args = '{"text":"call:get_weather for Paris"}'
    return counter.count_text(model, "get_weather") + counter.count_text(model, args)
