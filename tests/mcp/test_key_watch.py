"""`KeyStreams` and `KeyWatch`, in process: a key that may no longer call has its open GET
streams closed as a server closes an SSE stream (the last, empty chunk), its listen streams
ended; another key's streams, and a stream that ended on its own, are left as they are."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from gateway.mcp.key_watch import KeyStreams, KeyWatch

LOG = logging.getLogger("test")


async def sse_forever(scope: Scope, receive: Receive, send: Send) -> None:
    """A GET stream as the SDK serves one: headers, then events until cancelled."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    while True:
        await send({"type": "http.response.body", "body": b": ping\n\n", "more_body": True})
        await asyncio.sleep(0.01)


async def answered(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def recorder() -> tuple[list[Message], Send]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    return sent, send


async def no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def serve(streams: KeyStreams, key: tuple[str, str], app: Any) -> tuple[list[Message], Any]:
    sent, send = recorder()
    return sent, asyncio.create_task(streams.serve(key, app, {"type": "http"}, no_body, send))


def test_an_ended_keys_streams_close_cleanly_and_others_go_on() -> None:
    async def main() -> None:
        streams = KeyStreams()
        revoked, task = serve(streams, ("acme", "k2"), sse_forever)
        other_key, kept = serve(streams, ("acme", "k1"), sse_forever)
        other_tenant, kept_too = serve(streams, ("globex", "k2"), sse_forever)
        await asyncio.sleep(0.05)
        assert streams.keys() == {("acme", "k2"), ("acme", "k1"), ("globex", "k2")}
        streams.end(("acme", "k2"))
        await asyncio.wait_for(task, 1)
        assert revoked[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        assert sum(1 for m in revoked if not m.get("more_body", True)) == 1
        assert not kept.done() and not kept_too.done()
        assert streams.keys() == {("acme", "k1"), ("globex", "k2")}
        for task in (kept, kept_too):
            task.cancel()
        await asyncio.gather(kept, kept_too, return_exceptions=True)
        assert streams.keys() == set()
        assert all(m.get("more_body", True) for m in other_key + other_tenant)

    asyncio.run(main())


def test_a_stream_that_answered_on_its_own_gets_nothing_more() -> None:
    async def main() -> None:
        streams = KeyStreams()
        sent, task = serve(streams, ("acme", "k1"), answered)
        await task
        assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
        assert streams.keys() == set()
        streams.end(("acme", "k1"))  # nothing open: nothing happens

    asyncio.run(main())


class Listens:
    def __init__(self, keys: set[tuple[str, str]]) -> None:
        self.open = keys
        self.ended: list[tuple[str, str]] = []

    def keys(self) -> set[tuple[str, str]]:
        return set(self.open)

    def end_key(self, tenant: str, key_id: str) -> None:
        self.ended.append((tenant, key_id))


def test_the_watch_ends_only_keys_that_may_no_longer_call() -> None:
    async def main() -> None:
        streams = KeyStreams()
        _, gone = serve(streams, ("acme", "k2"), sse_forever)
        _, kept = serve(streams, ("acme", "k1"), sse_forever)
        await asyncio.sleep(0.02)
        listens = Listens({("acme", "k2"), ("globex", "k2")})
        asked: list[tuple[str, str]] = []

        def usable(tenant: str, key_id: str) -> bool:
            asked.append((tenant, key_id))
            return (tenant, key_id) != ("acme", "k2")

        KeyWatch(usable, streams, listens, LOG).check()
        assert sorted(asked) == [("acme", "k1"), ("acme", "k2"), ("globex", "k2")]
        assert listens.ended == [("acme", "k2")]
        await asyncio.wait_for(gone, 1)
        assert not kept.done()
        kept.cancel()
        await asyncio.gather(kept, return_exceptions=True)

    asyncio.run(main())


def test_a_failing_check_never_ends_the_watch() -> None:
    async def main() -> None:
        calls = 0

        def usable(tenant: str, key_id: str) -> bool:
            nonlocal calls
            calls += 1
            raise RuntimeError("key store unreadable")

        watch = KeyWatch(usable, KeyStreams(), Listens({("acme", "k1")}), LOG)
        task = asyncio.create_task(watch.run(0.01))
        await asyncio.sleep(0.1)
        assert calls >= 3 and not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
