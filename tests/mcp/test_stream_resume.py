"""Resuming a handshake-era stream with `Last-Event-ID`, in process: the real door in front of the
SDK's session manager (`TenantSessionManager` with `ReplayEvents`), driven over ASGI. A reply
whose stream was lost is sent again on a GET naming its priming event; the same id replays
nothing in another session, of the tenant or another; a session's events go when it ends (a
DELETE, its key revoked, its idle timeout)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import orjson
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings

from gateway.mcp.door import McpDoor
from gateway.mcp.replay import ReplayEvents
from gateway.mcp.sessions import TenantSessionManager
from tests.mcp.asgi_door import Keys, call_door
from tests.mcp.harness import INITIALIZE

PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
Event = dict[str, str]  # an SSE event's fields (id, event, data)


def sse_events(body: bytes) -> list[Event]:
    events = []
    for block in body.decode().replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            events.append(fields)
    return events


async def exchange(
    door: McpDoor,
    key: str,
    method: str = "POST",
    body: object = None,
    headers: dict[str, str] | None = None,
    events: int | None = None,
) -> tuple[int, dict[str, str], list[Event]]:
    """One HTTP request through the door: its status, headers and SSE events, read until the
    reply ends or, with `events`, until that many came (then the client goes away)."""
    enough = None if events is None else (lambda body: len(sse_events(body)) >= events)
    status, got, body = await call_door(door, key, method, body, headers, enough)
    return status, got, sse_events(body)


async def open_session(door: McpDoor, key: str) -> str:
    status, headers, _ = await exchange(door, key, body=INITIALIZE)
    assert status == 200
    session = headers["mcp-session-id"]
    assert (await exchange(door, key, body=INITIALIZED, headers=named(session)))[0] == 202
    return session


def named(session: str) -> dict[str, str]:
    return {"mcp-protocol-version": "2025-11-25", "mcp-session-id": session}


@asynccontextmanager
async def serving(
    idle_s: float = 60.0,
) -> AsyncIterator[tuple[TenantSessionManager, McpDoor, ReplayEvents]]:
    replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
    sessions = TenantSessionManager(
        Server("stream-resume"),
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=idle_s,
        max_sessions=100,
        max_sessions_per_tenant=10,
        replay=replay,
    )
    telemetry: Any = SimpleNamespace(is_tracing=False)
    async with sessions.run():
        yield sessions, McpDoor(sessions, Keys(), (), telemetry), replay


def test_a_reply_whose_stream_was_lost_is_sent_again() -> None:
    async def main() -> None:
        async with serving() as (_, door, _):
            session = await open_session(door, "acme-key")
            _, _, (priming, reply) = await exchange(
                door, "acme-key", body=PING, headers=named(session)
            )
            assert priming == {"id": f"{session}.2.rMg", "data": ""}  # request 2's stream
            assert orjson.loads(reply["data"]) == {"jsonrpc": "2.0", "id": 2, "result": {}}
            resume = {
                **named(session),
                "last-event-id": priming["id"],
                "accept": "text/event-stream",
            }
            status, _, events = await exchange(door, "acme-key", "GET", headers=resume, events=2)
            assert status == 200
            assert events[0] == {**reply, "id": f"{session}.3.rMg"}
            assert events[1] == {"id": f"{session}.4.rMg", "data": ""}  # the resumed stream's own

    asyncio.run(main())


def test_another_sessions_event_id_replays_nothing() -> None:
    async def main() -> None:
        async with serving() as (_, door, _):
            acme = await open_session(door, "acme-key")
            _, _, (priming, _) = await exchange(door, "acme-key", body=PING, headers=named(acme))
            for key in ("globex-key", "acme-key", "acme-key-2"):  # each in a session of its own
                other = await open_session(door, key)
                resume = {**named(other), "last-event-id": priming["id"]}
                status, _, events = await exchange(door, key, "GET", headers=resume)
                assert (status, events) == (200, []), key
            # another key naming acme's session is answered as if it did not exist
            resume = {**named(acme), "last-event-id": priming["id"]}
            assert (await exchange(door, "acme-key-2", "GET", headers=resume))[0] == 404

    asyncio.run(main())


def test_a_sessions_events_go_when_it_ends() -> None:
    async def main() -> None:
        async with serving(idle_s=0.5) as (sessions, door, replay):
            globex = await open_session(door, "globex-key")
            await exchange(door, "globex-key", body=PING, headers=named(globex))
            kept = replay.num_bytes("globex")
            deleted = await open_session(door, "acme-key")
            revoked = await open_session(door, "acme-key-2")
            await exchange(door, "acme-key", body=PING, headers=named(deleted))
            await exchange(door, "acme-key-2", body=PING, headers=named(revoked))
            with_both = replay.num_bytes("acme")
            assert (await exchange(door, "acme-key", "DELETE", headers=named(deleted)))[0] == 200
            assert 0 < replay.num_bytes("acme") < with_both
            await sessions.end_key("acme", "k2")
            assert replay.num_bytes("acme") == 0
            assert replay.num_bytes("globex") == kept
            for _ in range(50):  # globex's session idles out
                if sessions.open_sessions("globex") == 0:
                    break
                await asyncio.sleep(0.1)
            assert replay.num_bytes("globex") == 0

    asyncio.run(main())
