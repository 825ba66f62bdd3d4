"""Agent frameworks run their own tool loop through the gateway, stream and not, with their own
default max_tokens (64,000 for pydantic-ai, ChatAnthropic and LiteLLM) clamped to the cap:
pydantic-ai, langchain-openai and langchain-anthropic under a langgraph ReAct agent, and
LiteLLM as a client of both doors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import litellm
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from tests.clients.conftest import ASK, KEY, ToolLog, check_loop
from tests.e2e.harness import RunningGateway
from tests.fakes.upstream import FakeUpstream

DOORS = ["openai", "anthropic"]


def _pydantic_model(gateway: RunningGateway, door: str) -> OpenAIChatModel | AnthropicModel:
    if door == "openai":
        provider = OpenAIProvider(base_url=f"{gateway.url}/v1", api_key=KEY)
        return OpenAIChatModel("gpt-4o-mini", provider=provider)
    return AnthropicModel(
        "claude-sonnet-4-5", provider=AnthropicProvider(base_url=gateway.url, api_key=KEY)
    )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("door", DOORS)
def test_pydantic_ai_agent(
    gateway: RunningGateway, upstream: FakeUpstream, tools: ToolLog, door: str, stream: bool
) -> None:
    agent = Agent(_pydantic_model(gateway, door))
    agent.tool_plain(tools.get_weather)
    before = len(upstream.requests)

    async def run_streamed() -> str:
        async with agent.run_stream(ASK) as result:
            return "".join([t async for t in result.stream_text(delta=True)])

    answer = asyncio.run(run_streamed()) if stream else agent.run_sync(ASK).output
    check_loop(upstream, tools, before, answer)


def _langchain_model(gateway: RunningGateway, door: str, stream: bool) -> Any:
    if door == "openai":
        return ChatOpenAI(
            model="gpt-4o-mini",
            base_url=f"{gateway.url}/v1",
            api_key=KEY,
            streaming=stream,
            max_tokens=64000,
        )  # type: ignore[call-arg]
    return ChatAnthropic(
        model="claude-sonnet-4-5", base_url=gateway.url, api_key=KEY, streaming=stream
    )  # type: ignore[call-arg]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("door", DOORS)
def test_langgraph_react_agent(
    gateway: RunningGateway, upstream: FakeUpstream, tools: ToolLog, door: str, stream: bool
) -> None:
    weather = tool(tools.get_weather)
    agent = create_react_agent(_langchain_model(gateway, door, stream), [weather])
    before = len(upstream.requests)
    state = agent.invoke({"messages": [("user", ASK)]})
    answer = state["messages"][-1].content
    text = answer if isinstance(answer, str) else "".join(b.get("text", "") for b in answer)
    check_loop(upstream, tools, before, text)


LITELLM_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a place",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}


def _litellm_turn(gateway: RunningGateway, door: str, messages: list[Any], stream: bool) -> Any:
    target = (
        {"model": "openai/gpt-4o-mini", "api_base": f"{gateway.url}/v1"}
        if door == "openai"
        else {"model": "anthropic/claude-sonnet-4-5", "api_base": gateway.url}
    )
    reply = litellm.completion(
        **target,
        api_key=KEY,
        messages=messages,
        tools=[LITELLM_TOOL],
        max_tokens=64000,
        stream=stream,
    )
    if stream:
        reply = litellm.stream_chunk_builder(list(reply), messages=messages)
    return reply.choices[0].message


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("door", DOORS)
def test_litellm_as_a_client(
    gateway: RunningGateway, upstream: FakeUpstream, tools: ToolLog, door: str, stream: bool
) -> None:
    before = len(upstream.requests)
    messages: list[Any] = [{"role": "user", "content": ASK}]
    message = _litellm_turn(gateway, door, messages, stream)
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        result = tools.get_weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    check_loop(upstream, tools, before, _litellm_turn(gateway, door, messages, stream).content)
