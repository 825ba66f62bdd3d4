"""Agent frameworks, unmodified, running their own tool loop against a real `lantern serve`:
the model through the chat doors to the wire-level fake, which asks for the MCP tool (`call:`
with `args:`) and then answers with its result (`relay:result`); the tool through `/mcp` to an
upstream MCP server made with the SDK. openai-agents (`MCPServerStreamableHttp`, the Responses
door) and pydantic-ai (`MCPToolset`, the chat completions door).

langchain-mcp-adapters 0.3.2 needs mcp<2, so it runs in its own environment:
test_langchain_client.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator

import pytest
from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from mcp.shared.exceptions import MCPError
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from gateway.mcp.errors import LIMITED
from tests.e2e.conftest import models_for
from tests.e2e.harness import write_policy
from tests.fakes.upstream import FakeUpstream
from tests.mcp.clients import mcp_client
from tests.mcp.harness import ACME_KEY, RUN_PYTHON, Gateway, lantern_serve, upstream_server

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]
ASK = 'Where is order A-17? call:orders__lookup_order args:{"order_id":"A-17"} relay:result'
ORDER = "order A-17: shipped, 2 items"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, FakeUpstream]]:
    var_dir = tmp_path_factory.mktemp("frameworks")
    (var_dir / "policies").mkdir()
    write_policy(
        var_dir / "policies",
        "acme",
        ACME_KEY,
        tools=[RUN_PYTHON],
        mcp_servers=["orders"],
        limits={"calls_per_session": 3},
    )
    with FakeUpstream() as fake, upstream_server(var_dir, "orders") as orders:
        servers = [{"name": "orders", "url": orders.url, "timeout_s": 10}]
        config = {"mcp_servers": servers, "models": models_for(fake)[:1]}
        with lantern_serve(var_dir, **config) as gw:
            yield gw, fake


def session_rows(gw: Gateway, session: str, expected: int) -> list[tuple[str, str, str, str]]:
    """(door, model, backend, status) of the session's ledger rows, in time order."""
    deadline = time.monotonic() + 15
    while True:
        with sqlite3.connect(gw.var_dir / "lantern.db") as conn:
            rows = conn.execute(
                "SELECT door, model, backend, status FROM usage WHERE session_id = ? ORDER BY ts",
                (session,),
            ).fetchall()
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def headers(session: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ACME_KEY}", "x-session-id": session}


def test_openai_agents_lists_and_calls_a_sandboxed_tool(
    gateway: tuple[Gateway, FakeUpstream],
) -> None:
    gw, _ = gateway

    async def run() -> None:
        params = {"url": gw.mcp_url, "headers": {"Authorization": f"Bearer {ACME_KEY}"}}
        async with MCPServerStreamableHttp(params, cache_tools_list=True) as server:
            tools = await server.list_tools()
            assert [(t.name, t.input_schema["required"]) for t in tools] == [
                ("run_python", ["code"]),
                ("orders__lookup_order", ["order_id"]),
                ("orders__cancel_order", ["order_id"]),
            ]
            result = await server.call_tool("run_python", {"code": "print(6*7)"})
            assert (result.is_error, result.content[0].text) == (False, "42\n")

    asyncio.run(run())


def test_openai_agents_tool_loop_counts_the_session(gateway: tuple[Gateway, FakeUpstream]) -> None:
    """Model call (asks for the tool), tool call, model call (relays it): the session's three
    calls of `calls_per_session: 3`, so its next tool call is refused."""
    gw, fake = gateway
    set_tracing_disabled(True)  # no trace export: nothing may leave the machine

    async def run() -> str:
        client = AsyncOpenAI(
            base_url=f"{gw.url}/v1",
            api_key=ACME_KEY,
            max_retries=0,
            default_headers={"x-session-id": "run-agents"},
        )
        params = {"url": gw.mcp_url, "headers": headers("run-agents")}
        async with MCPServerStreamableHttp(params, cache_tools_list=True) as server:
            agent = Agent(
                name="orders",
                instructions="Answer from the order system.",
                mcp_servers=[server],
                model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client),
            )
            result = await Runner.run(agent, ASK, run_config=RunConfig(tracing_disabled=True))
            return str(result.final_output)

    before = len(fake.requests)
    assert ORDER in asyncio.run(run())
    asked = [r.json() for r in fake.requests[before:]]
    assert len(asked) == 2
    assert session_rows(gw, "run-agents", 3) == [
        ("responses", "gpt-4o-mini", "fake-openai", "ok"),
        ("mcp", "orders__lookup_order", "orders", "ok"),
        ("responses", "gpt-4o-mini", "fake-openai", "ok"),
    ]

    async def fourth_call() -> MCPError:
        async with mcp_client(gw.mcp_url, ACME_KEY, headers={"x-session-id": "run-agents"}) as c:
            with pytest.raises(MCPError) as refused:
                await c.call_tool("orders__lookup_order", {"order_id": "A-18"})
            return refused.value

    error = asyncio.run(fourth_call())
    assert (error.code, error.data["rule"]) == (LIMITED, "limits.calls_per_session")
    # the session's day runs from its last call: the hint is a day less the time since then
    # (the ledger rows above arrive up to the writer's 1 s linger later)
    assert 86_400 - 60 <= error.data["retry_after_s"] <= 86_400


def test_pydantic_ai_tool_loop(gateway: tuple[Gateway, FakeUpstream]) -> None:
    gw, fake = gateway
    client = AsyncOpenAI(
        base_url=f"{gw.url}/v1", api_key=ACME_KEY, default_headers={"x-session-id": "run-pyd"}
    )
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    toolset = MCPToolset(gw.mcp_url, headers=headers("run-pyd"))
    agent = PydanticAgent(model, toolsets=[toolset])
    before = len(fake.requests)
    assert ORDER in agent.run_sync(ASK).output
    assert len(fake.requests) - before == 2
    rows = session_rows(gw, "run-pyd", 3)
    assert [row[:3] for row in rows] == [
        ("chat.completions", "gpt-4o-mini", "fake-openai"),
        ("mcp", "orders__lookup_order", "orders"),
        ("chat.completions", "gpt-4o-mini", "fake-openai"),
    ]
