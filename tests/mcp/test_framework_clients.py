"""Agent frameworks' own MCP clients, unmodified, against `/mcp` of a real `lantern serve`.

openai-agents' `MCPServerStreamableHttp` so far; langchain-mcp-adapters (0.3.2) requires mcp<2,
and pydantic-ai's MCP extra (fastmcp-slim) is not installed in the dev environment yet.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agents.mcp import MCPServerStreamableHttp

from tests.e2e.harness import write_policy
from tests.mcp.harness import ACME_KEY, RUN_PYTHON, lantern_serve

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]


def test_openai_agents_lists_and_calls_a_sandboxed_tool(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", ACME_KEY, tools=[RUN_PYTHON])

    async def run(url: str) -> None:
        params = {"url": url, "headers": {"Authorization": f"Bearer {ACME_KEY}"}}
        async with MCPServerStreamableHttp(params, cache_tools_list=True) as server:
            tools = await server.list_tools()
            assert [(t.name, t.input_schema["required"]) for t in tools] == [
                ("run_python", ["code"])
            ]
            result = await server.call_tool("run_python", {"code": "print(6*7)"})
            assert (result.is_error, result.content[0].text) == (False, "42\n")

    with lantern_serve(tmp_path) as gw:
        asyncio.run(run(gw.mcp_url))
