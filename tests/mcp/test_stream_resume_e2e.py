"""Resumability from outside: a real `lantern serve`, raw HTTP. A handshake-era client's GET
stream is cut, the tenant's tool list changes meanwhile, and the GET it sends again with
`Last-Event-ID` is sent the `notifications/tools/list_changed` it missed; another tenant's
session naming that id is sent nothing; once the session is deleted its id answers 404."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.harness import write_policy
from tests.mcp.harness import ACME_KEY, GLOBEX_KEY, INITIALIZE, Gateway, lantern_serve

pytestmark = [pytest.mark.slow]
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def echo(name: str) -> dict[str, Any]:
    return {"name": name, "command": ["/bin/echo", "{text}"], "limits": {"wall_s": 20}}


def test_a_cut_get_stream_resumes_with_what_it_missed(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", ACME_KEY, tools=[echo("echo")])
    write_policy(tmp_path / "policies", "globex", GLOBEX_KEY)
    with lantern_serve(tmp_path, mcp={"change_poll_s": 0.2}) as gateway:
        asyncio.run(asyncio.wait_for(_check(gateway), 60))


async def _check(gateway: Gateway) -> None:
    policies = gateway.var_dir / "policies"
    async with httpx.AsyncClient(timeout=30) as http:
        acme = Session(http, gateway.mcp_url, ACME_KEY)
        await acme.open()
        await acme.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        async with acme.get() as stream:
            write_policy(policies, "acme", ACME_KEY, tools=[echo("echo"), echo("a_first")])
            [told] = await events(stream, 1)
        assert orjson.loads(told["data"]) == LIST_CHANGED
        assert told["id"].startswith(f"{acme.id}.")
        # the stream is cut; the list changes again while the client is away, and a second
        # session's GET stream, told in the same round after the first, says when
        witness = Session(http, gateway.mcp_url, ACME_KEY)
        await witness.open()
        await witness.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        async with witness.get() as watching:
            tools = [echo("echo"), echo("a_first"), echo("b_second")]
            write_policy(policies, "acme", ACME_KEY, tools=tools)
            assert [orjson.loads(e["data"]) for e in await events(watching, 1)] == [LIST_CHANGED]
        async with acme.get(last_event_id=told["id"]) as resumed:
            # replayed: a live event would come after the resumed stream's priming event
            missed, priming = await events(resumed, 2)
        assert orjson.loads(missed["data"]) == LIST_CHANGED
        assert missed["id"] != told["id"] and missed["id"].startswith(f"{acme.id}.")
        assert priming == {"id": priming["id"], "data": ""}  # the resumed stream's own cursor
        # globex's session naming acme's event is sent nothing
        globex = Session(http, gateway.mcp_url, GLOBEX_KEY)
        await globex.open()
        async with globex.get(last_event_id=told["id"]) as foreign:
            assert foreign.status_code == 200
            assert await foreign.aread() == b""
        deleted = await http.delete(gateway.mcp_url, headers=acme.headers())
        assert deleted.status_code == 200
        async with acme.get(last_event_id=told["id"]) as gone:
            assert gone.status_code == 404


class Session:
    """A handshake-era session spoken raw."""

    def __init__(self, http: httpx.AsyncClient, url: str, key: str) -> None:
        self.http, self.url, self.key, self.id = http, url, key, ""

    def headers(self, **more: str) -> dict[str, str]:
        headers = {
            "authorization": f"Bearer {self.key}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
            **more,
        }
        if self.id:
            headers["mcp-session-id"] = self.id
        return headers

    async def open(self) -> None:
        reply = await self.http.post(self.url, json=INITIALIZE, headers=self.headers())
        assert reply.status_code == 200, reply.text
        self.id = reply.headers["mcp-session-id"]
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def post(self, body: dict[str, Any]) -> httpx.Response:
        reply = await self.http.post(self.url, json=body, headers=self.headers())
        assert reply.status_code in (200, 202), reply.text
        return reply

    def get(self, last_event_id: str | None = None) -> Any:
        more = {"accept": "text/event-stream"}
        if last_event_id is not None:
            more["last-event-id"] = last_event_id
        return self.http.stream("GET", self.url, headers=self.headers(**more))


async def events(stream: httpx.Response, count: int) -> list[dict[str, str]]:
    """The next `count` SSE events of `stream` (their id, event and data; comments skipped)."""
    assert stream.status_code == 200
    found: list[dict[str, str]] = []
    lines: AsyncIterator[str] = stream.aiter_lines()
    fields: dict[str, str] = {}
    async for line in lines:
        if line:
            name, _, value = line.partition(": ")
            if name in ("id", "event", "data"):
                fields[name] = value
            continue
        if fields:
            found.append({k: v for k, v in fields.items() if k != "event"})
            fields = {}
        if len(found) == count:
            return found
    raise AssertionError(f"the stream ended after {found}")
