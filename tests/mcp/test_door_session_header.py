"""The `/mcp` door checks the agent-session header a tool call's ledger row stores
(`x-session-id`, or `x-lantern-session`) as the model doors do: at most 256 printable ASCII
characters, else 400 naming the header, before any session opens; the neighbour is unaffected."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.mcp.test_tenant_sessions import request, serving

TOO_LONG = "s" * 257


@pytest.mark.parametrize(
    ("header", "value", "message"),
    [
        ("x-session-id", TOO_LONG, "x-session-id has 257 characters; at most 256 are allowed"),
        ("x-session-id", "run\x01one", "x-session-id must be printable ASCII"),
        ("x-lantern-session", "run\tone", "x-lantern-session must be printable ASCII"),
    ],
)
def test_an_unusable_session_header_is_refused_naming_it(
    header: str, value: str, message: str
) -> None:
    async def main() -> None:
        async with serving() as (sessions, door):
            status, _, body = await request(door, "acme-key", **{header: value})
            assert status == 400
            reply = orjson.loads(body)
            assert reply["id"] is None
            assert reply["error"]["code"] == -32600
            assert reply["error"]["message"].startswith(message)
            assert reply["error"]["data"] == {"rule": "identifier", "field": header}
            assert sessions.open_sessions("acme") == 0
            status, _, _ = await request(door, "globex-key", **{"x-session-id": "s" * 256})
            assert status == 200
            assert sessions.open_sessions("globex") == 1

    asyncio.run(main())
