"""CPU per call of the gateway's own code, in one process, no sockets: the real ASGI app (front
door, pipeline, ledger, metrics, span) driven directly, its upstream replaced by canned replies.

    .venv/bin/python -m bench.gateway_inproc [--calls 2000] [--stream] [--profile N]
        [--gap-ms MS] [--no-defer] [--starlette-stream] [--no-relay] [--fastapi-doors]

Same body as bench/gateway_overhead.py. The figure excludes uvicorn, aiohttp and the kernel, so it
isolates what Lantern's code costs; `--profile N` prints the N costliest functions (cProfile).
`--gap-ms 40` idles the loop 40 ms between calls, as 25 calls/s do: caches go cold, the ledger
writer batches fewer rows, and timers run between calls (their CPU counts, as in the real server).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import pstats
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import uvloop
from starlette.responses import StreamingResponse

from adapters.sse import SSEParser, SSEvent
from adapters.types import (
    ChatResponse,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
)
from adapters.wire.openai import OpenAIStreamEncoder, encode_response
from bench.gateway_overhead import KEY, agent_body, write_lantern_config
from gateway.app import create_app
from gateway.core.after_reply import AfterReply
from gateway.settings import load_settings

WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog")
USAGE = Usage(input_tokens=6005, output_tokens=12)


def canned_json() -> bytes:
    text = "".join(WORDS[i % len(WORDS)] for i in range(12))
    resp = ChatResponse("chatcmpl-1", "gpt-4o-mini", (TextPart(text),), "stop", USAGE)
    return orjson.dumps(encode_response(resp, created=1))


def canned_sse() -> bytes:
    enc = OpenAIStreamEncoder(include_usage=True, created=1, model="gpt-4o-mini")
    events: list[StreamEvent] = [StreamStart("chatcmpl-1", "gpt-4o-mini")]
    events += [TextDelta(0, WORDS[i % len(WORDS)]) for i in range(12)]
    return b"".join(enc.encode(e) for e in [*events, StreamEnd("stop", USAGE)])


class CannedUpstream:
    """The `Upstream` port with fixed replies; parses them as the aiohttp upstream does."""

    def __init__(self) -> None:
        self._json, self._sse = canned_json(), canned_sse()

    async def post_json(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Any:
        return orjson.loads(self._json)

    async def post_sse(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[SSEvent]:
        parser = SSEParser()
        for event in parser.feed(self._sse):
            yield event

    async def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """The canned stream as the upstream's separate writes (one event per read): what an
        idle gateway sees, not the batches it reads when it falls behind."""
        for event in SSEParser().feed(self._sse):
            yield [event]


async def call_once(app: Any, body: bytes) -> float:
    """One POST through the ASGI app; returns the loop thread's CPU seconds until the reply's
    last body byte was sent (the critical path: no I/O waits in-process)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    sent: list[dict[str, Any]] = []
    done = asyncio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    replied = 0.0

    async def send(message: dict[str, Any]) -> None:
        nonlocal replied
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            replied = time.thread_time()

    started = time.thread_time()
    await app(scope, receive, send)
    done.set()
    if sent[0]["status"] != 200:
        raise RuntimeError(f"status {sent[0]['status']}: {sent[1:]}")
    return replied - started


async def run(
    calls: int,
    stream: bool,
    profile: int,
    defer: bool = True,
    lean: bool = True,
    relay: bool = True,
    lean_doors: bool = True,
    gap_s: float = 0.0,
) -> tuple[float, float]:
    """(CPU ms per call, ms per call until the reply's last byte was sent)."""
    with tempfile.TemporaryDirectory() as d:
        cfg = write_lantern_config(Path(d), "http://127.0.0.1:9/v1")
        app = create_app(load_settings(cfg))
        if not lean and app.chat_routes:  # the reference path: Starlette's streaming reply
            app.chat_routes.stream_reply = StreamingResponse
        if not lean_doors:  # the reference path: the doors through FastAPI's stack and router
            app.chat_routes = None
        parts = app.state.components
        for route in parts.models.routes():
            for candidate in route.candidates:
                candidate.backend._upstream = CannedUpstream()
        if not defer:  # the reference path: bookkeeping before the reply
            parts.pipeline.after_reply = AfterReply(immediate=True)
        if not relay:  # the reference path: streams decoded to events and re-encoded
            parts.pipeline.s = dataclasses.replace(parts.pipeline.s, relay_streams=False)
        await parts.start()
        try:
            bodies = [orjson.dumps(agent_body(stream, i)) for i in range(calls + 20)]
            for i in range(20):
                await call_once(app, bodies[calls + i])
            await asyncio.sleep(0.2)
            profiler = cProfile.Profile() if profile else None
            if profiler:
                profiler.enable()
            started, reply_s = time.process_time(), 0.0
            for i in range(calls):
                reply_s += await call_once(app, bodies[i])
                # at least one loop turn: the bookkeeping the reply did not wait for runs here
                await asyncio.sleep(gap_s)
            cpu = time.process_time() - started
            if profiler:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(profile)
        finally:
            await parts.stop()
    return cpu * 1000 / calls, reply_s * 1000 / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="idle time between calls")
    ap.add_argument("--no-defer", action="store_true", help="bookkeeping before the reply")
    ap.add_argument(
        "--starlette-stream", action="store_true", help="StreamingResponse (reference path)"
    )
    ap.add_argument("--no-relay", action="store_true", help="streams re-encoded (reference path)")
    ap.add_argument(
        "--fastapi-doors", action="store_true", help="chat doors through FastAPI (reference path)"
    )
    args = ap.parse_args()
    job = run(
        args.calls,
        args.stream,
        args.profile,
        not args.no_defer,
        not args.starlette_stream,
        not args.no_relay,
        not args.fastapi_doors,
        args.gap_ms / 1000,
    )
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        cpu_ms, reply_ms = runner.run(job)
    mode = "stream" if args.stream else "non-stream"
    print(f"{mode}: {cpu_ms:.3f} ms CPU per call (process, incl. the ledger thread), ", end="")
    print(f"{reply_ms:.3f} ms CPU until the last reply byte")


if __name__ == "__main__":
    main()
