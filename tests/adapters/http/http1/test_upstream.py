"""`Http1Upstream` / `Http1Pool`: keep-alive reuse, expiry, limits, and every way an upstream can
break HTTP/1.1, against the wire-level fake and a scripted raw TCP server, on uvloop (as served)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import pytest
import uvloop

from adapters.errors import ProviderRateLimited, ProviderTimeout, ProviderUnavailable
from adapters.http.aiohttp_pool import AiohttpUpstream
from adapters.http.http1.pool import Http1Pool
from adapters.http.http1.upstream import Http1Upstream, is_plain_http
from tests.fakes.upstream import FakeUpstream

T = TypeVar("T")
HI = orjson.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
JSON_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


def on_uvloop(main: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Script:
    """What the raw server answers, request by request: a list of (bytes, pause_s) writes and
    whether it then closes the connection."""

    replies: list[tuple[list[tuple[bytes, float]], bool]]
    requests: list[bytes] = field(default_factory=list)
    num_connections: int = 0


async def serve(script: Script) -> tuple[asyncio.Server, str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        script.num_connections += 1
        try:
            while script.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                script.requests.append(head + await reader.readexactly(length))
                writes, close = script.replies.pop(0)
                for data, pause_s in writes:
                    writer.write(data)
                    await writer.drain()
                    if pause_s:
                        await asyncio.sleep(pause_s)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions"


def json_reply(payload: dict[str, Any], extra: bytes = b"") -> bytes:
    body = orjson.dumps(payload)
    return JSON_HEAD + extra + b"content-length: %d\r\n\r\n" % len(body) + body


def scripted(script: Script, use: Callable[[Http1Upstream, Http1Pool], Awaitable[T]]) -> T:
    async def main() -> T:
        server, url = await serve(script)
        pool = Http1Pool()
        try:
            return await use(Http1Upstream("raw", pool, url, {"content-type": "x"}), pool)
        finally:
            await pool.aclose()
            server.close()

    return on_uvloop(main)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


def test_connections_are_reused_and_expire_after_keepalive(upstream: FakeUpstream) -> None:
    clock = Clock()
    pool = Http1Pool(keepalive_s=4.0, clock=clock)
    url = upstream.openai_base_url + "/chat/completions"
    up = Http1Upstream("fake", pool, url, {"content-type": "application/json"})
    stream = orjson.dumps({**orjson.loads(HI), "stream": True})

    async def main() -> list[int]:
        seen = []
        for _ in range(5):
            reply = await up.post_json(HI, timeout_s=5, headers={"x-session-id": "s1"})
            seen.append(reply["usage"]["completion_tokens"])
        events = [e async for e in up.post_sse(stream, timeout_s=5)]
        assert events[-1].data == "[DONE]"
        assert (pool.num_connects, pool.num_open) == (1, 1)
        clock.now += 3.9  # still fresh
        await up.post_json(HI, timeout_s=5)
        assert pool.num_connects == 1
        clock.now += 4.0  # idle for the whole keep-alive: dropped, a new one is opened
        await up.post_json(HI, timeout_s=5)
        assert pool.num_connects == 2
        await asyncio.sleep(0.05)  # the dropped one's close is seen
        assert pool.num_open == 1
        await pool.aclose()
        return seen

    assert on_uvloop(main) == [9, 9, 9, 9, 9]  # the fake's default reply
    assert [r.headers.get("x-session-id") for r in upstream.requests[:2]] == ["s1", "s1"]
    assert upstream.requests[0].headers["content-type"] == "application/json"


def test_a_second_loop_starts_an_empty_pool(upstream: FakeUpstream) -> None:
    pool = Http1Pool()
    up = Http1Upstream("fake", pool, upstream.openai_base_url + "/chat/completions", {})
    for _ in range(2):
        on_uvloop(lambda: up.post_json(HI, timeout_s=5))
    assert (pool.num_connects, pool.num_open) == (2, 1)


def test_chunked_reply_split_across_writes() -> None:
    head = JSON_HEAD + b"transfer-encoding: chunked\r\n\r\n"
    script = Script(
        [
            (
                [
                    (head + b'5\r\n{"a":\r\n', 0.01),
                    (b"2\r\n12\r\n", 0.01),
                    (b'3\r\n,"b\r\n', 0),
                    (b'4\r\n":3}\r\n0\r\n\r\n', 0),
                ],
                False,
            )
        ]
        * 2
    )

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        assert await up.post_json(HI, timeout_s=5) == {"a": 12, "b": 3}
        assert await up.post_json(HI, timeout_s=5) == {"a": 12, "b": 3}
        assert pool.num_connects == 1

    scripted(script, use)
    assert script.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")
    assert script.requests[0].endswith(
        b"content-type: x\r\ncontent-length: %d\r\n\r\n" % len(HI) + HI
    )


def test_reply_ending_at_eof_is_read_and_its_connection_not_reused() -> None:
    no_length = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n"
    close = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 8\r\n\r\n"
    script = Script(
        [([(no_length + b'{"a":', 0.01), (b"1}", 0)], True), ([(close + b'{"b": 2}', 0)], True)]
    )

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        assert await up.post_json(HI, timeout_s=5) == {"a": 1}
        assert await up.post_json(HI, timeout_s=5) == {"b": 2}
        assert pool.num_connects == 2

    scripted(script, use)
    assert script.num_connections == 2


@pytest.mark.parametrize(
    ("writes", "detail"),
    [
        ([(JSON_HEAD + b"content-length: 50\r\n\r\n{", 0)], "closed the connection"),
        ([(b"NOT HTTP AT ALL\r\n\r\n", 0)], "invalid HTTP reply"),
        ([(JSON_HEAD + b"content-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}", 0)], "gzip"),
        ([], "closed the connection"),
    ],
)
def test_broken_replies_are_unavailable(writes: list[tuple[bytes, float]], detail: str) -> None:
    script = Script([(writes, True)])

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        with pytest.raises(ProviderUnavailable) as info:
            await up.post_json(HI, timeout_s=5)
        assert detail in info.value.detail
        assert info.value.detail.startswith("UpstreamProtocolError: ")
        await asyncio.sleep(0.05)
        assert pool.num_open == 0

    scripted(script, use)


def test_status_errors_map_as_for_every_upstream() -> None:
    limited = b"HTTP/1.1 429 Too Many\r\nretry-after: 7\r\ncontent-length: 27\r\n\r\n"
    script = Script([([(limited + b'{"error":{"message":"slow"}}'[:27], 0)], False)] * 2)

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        with pytest.raises(ProviderRateLimited) as info:
            await up.post_json(HI, timeout_s=5)
        assert (info.value.retry_after_s, info.value.upstream_status) == (7.0, 429)
        with pytest.raises(ProviderRateLimited):
            [e async for e in up.post_sse(HI, timeout_s=5)]
        assert pool.num_connects == 1  # an error reply read whole keeps its connection

    scripted(script, use)


def test_header_injection_is_refused_before_anything_is_sent() -> None:
    script = Script([([(json_reply({"ok": 1}), 0)], False)])

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        for bad in ({"x-session-id": "a\r\nx-admin: 1"}, {"x\nsession": "a"}):
            with pytest.raises(ValueError, match="Forbidden control character"):
                await up.post_json(HI, timeout_s=5, headers=bad)
        assert pool.num_connects == 0
        assert await up.post_json(HI, timeout_s=5, headers={"x-session-id": "a\tb"}) == {"ok": 1}

    scripted(script, use)


def test_a_call_header_replaces_the_backend_one() -> None:
    script = Script([([(json_reply({"ok": 1}), 0)], False)])
    scripted(script, lambda up, _: up.post_json(HI, timeout_s=5, headers={"Content-Type": "y"}))
    assert b"content-type: y\r\n" in script.requests[0]
    assert b"content-type: x" not in script.requests[0]


def test_sse_reads_keep_their_grouping() -> None:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )

    def chunk(text: bytes) -> bytes:
        return b"%x\r\n" % len(text) + text + b"\r\n"

    writes = [
        (head + chunk(b"data: 1\n\n"), 0.05),
        (chunk(b"data: 2\n\ndata: 3\n\n"), 0.05),
        (chunk(b"data: 4\n") + chunk(b"\n") + b"0\r\n\r\n", 0),
    ]

    async def use(up: Http1Upstream, pool: Http1Pool) -> list[list[str]]:
        return [[e.data for e in read] async for read in up.post_sse_reads(HI, timeout_s=5)]

    assert scripted(Script([(writes, False)]), use) == [["1"], ["2", "3"], ["4"]]


def test_stalled_stream_times_out_and_its_connection_closes() -> None:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    script = Script([([(head + b"9\r\ndata: 1\n\n\r\n", 1.0)], True)])

    async def use(up: Http1Upstream, pool: Http1Pool) -> list[str]:
        seen = []
        with pytest.raises(ProviderTimeout):
            async for event in up.post_sse(HI, timeout_s=0.2):
                seen.append(event.data)
        await asyncio.sleep(0.05)
        assert pool.num_open == 0
        return seen

    assert scripted(script, use) == ["1"]


def test_a_stream_read_slowly_does_not_time_out_between_reads() -> None:
    """`timeout_s` bounds each wait on the upstream, not the time the reader takes between
    reads (a slow client's backpressure)."""
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    first, rest = head + b"9\r\ndata: 1\n\n\r\n", b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    script = Script([([(first, 0.3), (rest, 0.0)], False)])  # the rest comes 0.3 s later

    async def use(up: Http1Upstream, pool: Http1Pool) -> list[str]:
        seen = []
        async for event in up.post_sse(HI, timeout_s=0.2):
            seen.append(event.data)
            await asyncio.sleep(0.4)  # past the timeout, between reads
        return seen

    assert scripted(script, use) == ["1", "2"]


def test_whole_exchange_timeout_and_cancellation_close_the_connection() -> None:
    script = Script([([(b"", 1.0)], True), ([(b"", 1.0)], True)])

    async def use(up: Http1Upstream, pool: Http1Pool) -> None:
        with pytest.raises(ProviderTimeout):
            await up.post_json(HI, timeout_s=0.2)
        task = asyncio.ensure_future(up.post_json(HI, timeout_s=5))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert (pool.num_connects, pool.num_open) == (2, 0)

    scripted(script, use)


def test_connection_limit_makes_callers_wait_for_a_free_one() -> None:
    script = Script([([(json_reply({"n": i}), 0.0)], False) for i in range(3)])

    async def main() -> list[Any]:
        server, url = await serve(script)
        pool = Http1Pool(max_connections=1)
        up = Http1Upstream("raw", pool, url, {})
        try:
            replies = await asyncio.gather(*(up.post_json(HI, timeout_s=5) for _ in range(3)))
            assert pool.num_connects == 1
            return replies
        finally:
            await pool.aclose()
            server.close()

    assert on_uvloop(main) == [{"n": 0}, {"n": 1}, {"n": 2}]


def test_at_the_limit_another_hosts_idle_connection_is_closed_for_a_new_one() -> None:
    # host 0 would answer twice: it keeps the connection open, idle in the pool
    scripts = [Script([([(json_reply({"host": i}), 0.0)], False)] * (2 - i)) for i in range(2)]

    async def main() -> list[Any]:
        served = [await serve(s) for s in scripts]
        pool = Http1Pool(max_connections=1)
        ups = [Http1Upstream(f"raw{i}", pool, url, {}) for i, (_, url) in enumerate(served)]
        try:
            replies = [await up.post_json(HI, timeout_s=5) for up in ups]
            assert pool.num_connects == 2
            return replies
        finally:
            await pool.aclose()
            for server, _ in served:
                server.close()

    assert on_uvloop(main) == [{"host": 0}, {"host": 1}]


def test_connection_refused_is_unavailable_and_frees_its_slot() -> None:
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        pool = Http1Pool(max_connections=1)
        up = Http1Upstream("gone", pool, f"http://127.0.0.1:{port}/v1/chat/completions", {})
        for _ in range(2):  # the failed connect gave its slot back: no wait the second time
            with pytest.raises(ProviderUnavailable):
                await up.post_json(HI, timeout_s=2)
        assert pool.num_open == 0

    on_uvloop(main)


def test_only_plain_http_urls_get_the_lean_upstream() -> None:
    pool = Http1Pool()
    assert is_plain_http("http://h:8000/v1") and not is_plain_http("https://api.openai.com/v1")
    assert not is_plain_http("http://user:pw@h/v1")
    assert isinstance(pool.upstream("a", "http://h:8000/v1/x", {}), Http1Upstream)
    tls = pool.upstream("b", "https://api.openai.com/v1/x", {})
    assert isinstance(tls, AiohttpUpstream)
    with pytest.raises(ValueError, match="http:// URLs"):
        Http1Upstream("c", pool, "https://api.openai.com/v1/x", {})
