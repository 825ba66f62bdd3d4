"""The events kept for resuming handshake-era streams (`ReplayEvents`), without HTTP: the newest
`events_per_session` of a session (its oldest go, no other session's), `bytes_per_tenant` in all
of a tenant's sessions (the tenant's oldest go, never another tenant's), a replay only of the
stream the id was on and only from the session's own ids, and nothing kept once it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage
from mcp_types import JSONRPCNotification

from gateway.mcp.replay import EVENT_OVERHEAD_BYTES, ReplayEvents, SessionEvents

# what one `note(i)` (i < 10) on the GET stream counts
NOTE_BYTES = EVENT_OVERHEAD_BYTES + len(GET_STREAM_KEY) + len('{"jsonrpc":"2.0","method":"n/0"}')


def note(i: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method=f"n/{i}")


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def session(replay: ReplayEvents, tenant: str, session_id: str) -> SessionEvents:
    events = replay.open(tenant)
    replay.admitted(events, session_id)
    return events


async def store(events: SessionEvents, *notes: int, stream: str = GET_STREAM_KEY) -> list[str]:
    return [await events.store_event(stream, note(i)) for i in notes]


async def replayed(events: SessionEvents, last_event_id: str) -> tuple[str | None, list[Any]]:
    """The stream named and the (id, method) of each event sent again."""
    sent: list[tuple[str | None, object]] = []

    async def send(event: EventMessage) -> None:
        sent.append((event.event_id, getattr(event.message, "method", None)))

    return await events.replay_events_after(last_event_id, send), sent


def test_a_full_session_loses_its_own_oldest_event_only() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=3, bytes_per_tenant=1 << 20)
        a, b = session(replay, "acme", "sa"), session(replay, "acme", "sb")
        assert await store(a, 0, 1, 2, 3) == ["sa.0", "sa.1", "sa.2", "sa.3"]
        assert await store(b, 0, 1, 2) == ["sb.0", "sb.1", "sb.2"]
        assert await replayed(a, "sa.0") == (None, [])  # the fourth pushed it out
        assert await replayed(a, "sa.1") == (GET_STREAM_KEY, [("sa.2", "n/2"), ("sa.3", "n/3")])
        assert await replayed(b, "sb.0") == (GET_STREAM_KEY, [("sb.1", "n/1"), ("sb.2", "n/2")])
        assert replay.num_bytes("acme") == 6 * NOTE_BYTES

    run(main())


def test_a_tenant_over_its_bytes_loses_its_own_oldest_never_another_tenants() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=3 * NOTE_BYTES)
        a, b = session(replay, "acme", "sa"), session(replay, "acme", "sb")
        globex = session(replay, "globex", "sg")
        await store(a, 0, 1)
        await store(globex, 0, 1, 2)  # globex at its cap
        await store(b, 0)  # acme's third: all it may hold
        assert await replayed(a, "sa.0") == (GET_STREAM_KEY, [("sa.1", "n/1")])
        await store(b, 1, 2)  # acme's fourth and fifth: acme's two oldest (a's) go
        assert replay.num_bytes("acme") == 3 * NOTE_BYTES
        assert await replayed(a, "sa.0") == (None, [])
        assert await replayed(a, "sa.1") == (None, [])
        assert await replayed(b, "sb.0") == (GET_STREAM_KEY, [("sb.1", "n/1"), ("sb.2", "n/2")])
        assert replay.num_bytes("globex") == 3 * NOTE_BYTES
        assert await replayed(globex, "sg.0") == (
            GET_STREAM_KEY,
            [("sg.1", "n/1"), ("sg.2", "n/2")],
        )

    run(main())


def test_an_event_larger_than_the_tenants_bytes_ends_what_can_be_replayed() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=3 * NOTE_BYTES)
        a = session(replay, "acme", "sa")
        await store(a, 0, 1)
        large = JSONRPCNotification(jsonrpc="2.0", method="n/" + "x" * 3 * NOTE_BYTES)
        assert await a.store_event(GET_STREAM_KEY, large) == "sa.2"
        # a client that saw 0 or 1 would miss the large one: it is offered no replay
        assert await replayed(a, "sa.0") == (None, [])
        assert await replayed(a, "sa.2") == (None, [])
        assert replay.num_bytes("acme") == 0
        await store(a, 3, 4)
        assert await replayed(a, "sa.3") == (GET_STREAM_KEY, [("sa.4", "n/4")])

    run(main())


def test_a_replay_is_of_the_stream_its_id_was_on() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a = session(replay, "acme", "sa")
        await a.store_event("7", None)  # a POST's priming event: sa.0
        await store(a, 1)
        await store(a, 2, stream="7")
        await store(a, 3)
        assert await replayed(a, "sa.0") == ("7", [("sa.2", "n/2")])
        assert await replayed(a, "sa.1") == (GET_STREAM_KEY, [("sa.3", "n/3")])

    run(main())


def test_only_the_sessions_own_ids_replay() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a, a2 = session(replay, "acme", "sa"), session(replay, "acme", "sa2")
        globex = session(replay, "globex", "sg")
        await store(a, 0, 1)
        await store(a2, 0, 1)
        await store(globex, 0, 1)
        for foreign in ("sg.0", "sa2.0", "sa.-1", "sa.٠", "sa. 0", "sa.0.0", "sa", "", "0"):
            assert await replayed(a, foreign) == (None, []), foreign
        assert await replayed(globex, "sa.0") == (None, [])
        assert await replayed(a, "sa.0") == (GET_STREAM_KEY, [("sa.1", "n/1")])

    run(main())


def test_an_ended_sessions_events_are_forgotten_and_nothing_more_is_kept() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a, b = session(replay, "acme", "sa"), session(replay, "acme", "sb")
        await store(a, 0, 1)
        await store(b, 0, 1)
        replay.forget("sa")
        assert replay.num_bytes("acme") == 2 * NOTE_BYTES
        assert await store(a, 2) == ["sa.2"]  # sent as the session ends: not kept
        assert await replayed(a, "sa.0") == (None, [])
        assert replay.num_bytes("acme") == 2 * NOTE_BYTES
        replay.forget("sb")
        replay.forget("sb")  # forgotten twice: nothing happens
        assert replay.num_bytes("acme") == 0

    run(main())
