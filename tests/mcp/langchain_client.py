"""LangChain's MCP adapters, unmodified, against Lantern's `/mcp`: run with the Python of
`.venv-langchain` (langchain-mcp-adapters 0.3.2 needs mcp<2, see Makefile), not the project's.

`python langchain_client.py URL KEY`: lists the tenant's tools with `MultiServerMCPClient`, calls
those of `run_python` and `orders__lookup_order` it lists, as LangChain tools, and prints one JSON
object:
{"tools": [names], "results": {tool: text}, "protocol_version": the negotiated revision}.
A failure prints {"error": type name, "message": ...} and exits 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain_mcp_adapters.client import MultiServerMCPClient


async def run(url: str, key: str) -> dict[str, Any]:
    connection = {
        "url": url,
        "transport": "streamable_http",
        "headers": {"Authorization": f"Bearer {key}"},
    }
    client = MultiServerMCPClient({"lantern": connection})  # type: ignore[dict-item]
    tools = await client.get_tools()
    by_name = {tool.name: tool for tool in tools}
    calls = {
        "run_python": {"code": "print(6*7)"},
        "orders__lookup_order": {"order_id": "A-17"},
    }
    results = {
        name: _text(await by_name[name].ainvoke(args))
        for name, args in calls.items()
        if name in by_name
    }
    # the revision the handshake settles on (initialized here, not by the adapters)
    async with client.session("lantern", auto_initialize=False) as session:
        version = (await session.initialize()).protocolVersion
    return {"tools": [tool.name for tool in tools], "results": results, "protocol_version": version}


def _text(result: Any) -> str:
    """A tool's answer as LangChain gives it: a string, or a list of content blocks."""
    if isinstance(result, str):
        return result
    return "".join(block["text"] for block in result if block.get("type") == "text")


def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    try:
        out = asyncio.run(run(url, key))
    except BaseException as exc:  # noqa: BLE001 - report it to the test, whatever it is
        print(json.dumps({"error": type(exc).__name__, "message": _message(exc)}))
        sys.exit(1)
    print(json.dumps(out))


def _message(exc: BaseException) -> str:
    """The innermost message: anyio task groups wrap the transport's error in groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    main()
