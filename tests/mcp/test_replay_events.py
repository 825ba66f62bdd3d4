"""The events kept for resuming handshake-era streams (`ReplayEvents`), without HTTP: the newest
`events_per_session` of a session (its oldest go, no other session's), `bytes_per_tenant` in all
of a tenant's sessions (the tenant's oldest go, never another tenant's), a replay only of the
stream the id was on and only from the session's own ids, and nothing kept once it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse

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
        assert await store(a, 0, 1, 2, 3) == ["sa.0.g", "sa.1.g", "sa.2.g", "sa.3.g"]
        assert await store(b, 0, 1, 2) == ["sb.0.g", "sb.1.g", "sb.2.g"]
        # the fourth pushed it out: the GET stream goes on from now, nothing sent again
        assert await replayed(a, "sa.0.g") == (GET_STREAM_KEY, [])
        assert await replayed(a, "sa.1.g") == (
            GET_STREAM_KEY,
            [("sa.2.g", "n/2"), ("sa.3.g", "n/3")],
        )
        assert await replayed(b, "sb.0.g") == (
            GET_STREAM_KEY,
            [("sb.1.g", "n/1"), ("sb.2.g", "n/2")],
        )
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
        assert await replayed(a, "sa.0.g") == (GET_STREAM_KEY, [("sa.1.g", "n/1")])
        await store(b, 1, 2)  # acme's fourth and fifth: acme's two oldest (a's) go
        assert replay.num_bytes("acme") == 3 * NOTE_BYTES
        assert await replayed(a, "sa.0.g") == (GET_STREAM_KEY, [])
        assert await replayed(a, "sa.1.g") == (GET_STREAM_KEY, [])
        assert await replayed(b, "sb.0.g") == (
            GET_STREAM_KEY,
            [("sb.1.g", "n/1"), ("sb.2.g", "n/2")],
        )
        assert replay.num_bytes("globex") == 3 * NOTE_BYTES
        assert await replayed(globex, "sg.0.g") == (
            GET_STREAM_KEY,
            [("sg.1.g", "n/1"), ("sg.2.g", "n/2")],
        )

    run(main())


def test_an_event_larger_than_the_tenants_bytes_ends_what_can_be_replayed() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=3 * NOTE_BYTES)
        a = session(replay, "acme", "sa")
        await store(a, 0, 1)
        large = JSONRPCNotification(jsonrpc="2.0", method="n/" + "x" * 3 * NOTE_BYTES)
        assert await a.store_event(GET_STREAM_KEY, large) == "sa.2.g"
        # a client that saw 0 or 1 would miss the large one: it is offered no replay
        assert await replayed(a, "sa.0.g") == (GET_STREAM_KEY, [])
        assert await replayed(a, "sa.2.g") == (GET_STREAM_KEY, [])
        assert replay.num_bytes("acme") == 0
        await store(a, 3, 4)
        assert await replayed(a, "sa.3.g") == (GET_STREAM_KEY, [("sa.4.g", "n/4")])

    run(main())


def test_a_replay_is_of_the_stream_its_id_was_on() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a = session(replay, "acme", "sa")
        assert await a.store_event("7", None) == "sa.0.rNw"  # a POST's priming event
        await store(a, 1)
        await store(a, 2, stream="7")
        await store(a, 3)
        assert await replayed(a, "sa.0.rNw") == ("7", [("sa.2.rNw", "n/2")])
        assert await replayed(a, "sa.1.g") == (GET_STREAM_KEY, [("sa.3.g", "n/3")])

    run(main())


def test_only_the_sessions_own_ids_replay() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a, a2 = session(replay, "acme", "sa"), session(replay, "acme", "sa2")
        globex = session(replay, "globex", "sg")
        await store(a, 0, 1)
        await store(a2, 0, 1)
        await store(globex, 0, 1)
        foreign_ids = ("sg.0.g", "sa2.0.g", "sa.-1.g", "sa.٠.g", "sa. 0.g", "sa.0", "sa.0.g.g")
        for foreign in (*foreign_ids, "sa.2.g", "sa.0.0", "sa", "", "0"):
            assert await replayed(a, foreign) == (None, []), foreign
        assert await replayed(globex, "sa.0.g") == (None, [])
        assert await replayed(a, "sa.0.g") == (GET_STREAM_KEY, [("sa.1.g", "n/1")])

    run(main())


def test_an_ended_sessions_events_are_forgotten_and_nothing_more_is_kept() -> None:
    async def main() -> None:
        replay = ReplayEvents(events_per_session=100, bytes_per_tenant=1 << 20)
        a, b = session(replay, "acme", "sa"), session(replay, "acme", "sb")
        await store(a, 0, 1)
        await store(b, 0, 1)
        replay.forget("sa")
        assert replay.num_bytes("acme") == 2 * NOTE_BYTES
        assert await store(a, 2) == ["sa.2.g"]  # sent as the session ends: not kept
        assert await replayed(a, "sa.0.g") == (None, [])  # nor resumed: the session is over
        assert replay.num_bytes("acme") == 2 * NOTE_BYTES
        replay.forget("sb")
        replay.forget("sb")  # forgotten twice: nothing happens
        assert replay.num_bytes("acme") == 0

    run(main())


def test_a_request_whose_events_are_gone_ends_with_an_error_or_goes_on_if_unanswered() -> None:
    """A client's stream of a request, cut after the session's newer events pushed its own out:
    an answered request gets an error for the reply that is gone (the SDK's client would
    otherwise ask again every second for ever); an unanswered one goes on from now."""

    async def main() -> None:
        replay = ReplayEvents(events_per_session=2, bytes_per_tenant=1 << 20)
        a = session(replay, "acme", "sa")
        answered = await a.store_event("7", None)
        await a.store_event("7", JSONRPCResponse(jsonrpc="2.0", id=7, result={}))
        waiting = await a.store_event("8", None)
        await store(a, 3, 4)  # both requests' events pushed out
        sent: list[EventMessage] = []

        async def send(event: EventMessage) -> None:
            sent.append(event)

        assert await a.replay_events_after(answered, send) is None
        assert len(sent) == 1 and isinstance(sent[0].message, JSONRPCError)
        assert sent[0].message.id == "7"
        assert sent[0].message.error.data == {"rule": "replay_events_per_session"}
        assert await replayed(a, waiting) == ("8", [])
        long_id = "x" * 49  # too long to be named in an id: as an unknown id
        assert await a.store_event(long_id, None) == "sa.5.r"
        await store(a, 6, 7)
        assert await replayed(a, "sa.5.r") == (None, [])

    run(main())
