"""The streaming relay (an OpenAI client, an OpenAI-compatible backend): through the real chat
door, pipeline and backend, the client gets the upstream's own bytes but for the documented
edits (model name, usage chunk, `[DONE]`), what arrived in one read leaves in one write, usage
settles exactly, a client that leaves mid-stream is recorded with what it got, an upstream error
mid-stream is reported in-band; and against the real fake upstream over HTTP the relay sends what
the reference path (decode to events, re-encode) sends."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping, MutableMapping
from typing import Any

import orjson
import pytest
from fastapi import FastAPI

from adapters.backends.openai_compatible import OpenAICompatibleBackend
from adapters.backends.spec import BackendSpec
from adapters.http.aiohttp_pool import AiohttpPool
from adapters.sse import SSEParser, SSEvent
from adapters.types import Usage
from gateway.core.pipeline import Pipeline
from gateway.http.chat_routes import ChatRoutes, build_chat_router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.core.test_after_reply import Fakes, build
from tests.gateway.http.test_sse_reply import Keys, drive

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
DETAILS = {"prompt_tokens_details": {"cached_tokens": 4}}


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_up",  # a field Lantern does not know: must pass through
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def upstream_stream(
    model: str = "m", usage: Mapping[str, Any] | None = None, done: bool = True
) -> bytes:
    usage_chunk = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [],
        "usage": {**USAGE, **DETAILS} if usage is None else usage,
    }
    parts = [
        chunk(model, {"role": "assistant", "content": ""}),
        chunk(model, {"content": "hi"}),
        chunk(model, {"content": " there"}),
        chunk(model, {"content": " you"}),
        chunk(model, {}, "stop"),
        b"data: " + orjson.dumps(usage_chunk) + b"\n\n",
    ]
    return b"".join(parts) + (b"data: [DONE]\n\n" if done else b"")


class ScriptedUpstream:
    """The backend's `Upstream` port replaying fixed SSE bytes, cut into reads of `read_bytes`
    (events completed by one read arrive together, as from a socket)."""

    def __init__(self, raw: bytes, read_bytes: int = 10_000, hang_after: int | None = None):
        self.raw, self.read_bytes, self.hang_after = raw, read_bytes, hang_after
        self.bodies: list[dict[str, Any]] = []

    async def post_json(self, body: bytes, **kw: Any) -> Any:
        raise AssertionError("not used")

    async def post_sse(self, body: bytes, **kw: Any) -> AsyncIterator[SSEvent]:
        async for events in self.post_sse_reads(body, **kw):
            for event in events:
                yield event

    async def post_sse_reads(self, body: bytes, **kw: Any) -> AsyncIterator[list[SSEvent]]:
        self.bodies.append(orjson.loads(body))
        parser = SSEParser()
        for n, start in enumerate(range(0, len(self.raw), self.read_bytes)):
            if self.hang_after is not None and n == self.hang_after:
                await asyncio.sleep(3600)
            events = parser.feed(self.raw[start : start + self.read_bytes])
            if events:
                yield events
            await asyncio.sleep(0)


def backend(upstream: Any, model: str | None = None) -> OpenAICompatibleBackend:
    spec = BackendSpec("fake", "openai_compatible", "http://127.0.0.1:9/v1", model=model)
    b = OpenAICompatibleBackend(spec, http=AiohttpPool())  # the pool is never opened
    b._upstream = upstream
    return b


def request_body(include_usage: bool = True) -> bytes:
    body: dict[str, Any] = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


async def serve(
    pipeline: Pipeline, body: bytes, leave_after: int | None = None
) -> list[MutableMapping[str, Any]]:
    """One call through the chat door at ASGI level; the client leaves after `leave_after`
    body messages."""
    app = FastAPI()
    app.include_router(build_chat_router(ChatRoutes(pipeline, Keys())))
    return await drive(app, body, leave_after)


def body_of(sent: list[MutableMapping[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent)


def relayed(
    raw: bytes, *, read_bytes: int = 10_000, model: str | None = None, include_usage: bool = True
) -> tuple[list[MutableMapping[str, Any]], Fakes, ScriptedUpstream]:
    async def main() -> tuple[list[MutableMapping[str, Any]], Fakes, ScriptedUpstream]:
        up = ScriptedUpstream(raw, read_bytes)
        pipeline, fakes, _ = build(backend(up, model))  # type: ignore[arg-type]
        return await serve(pipeline, request_body(include_usage)), fakes, up

    return asyncio.run(main())


def test_the_client_gets_the_upstreams_bytes() -> None:
    raw = upstream_stream()
    sent, fakes, up = relayed(raw)
    assert sent[0]["status"] == 200
    assert body_of(sent) == raw
    assert up.bodies[0]["stream_options"] == {"include_usage": True}
    assert fakes.settled == [Usage(input_tokens=7, output_tokens=3, cache_read_tokens=4)]
    assert [(r.status, r.usage.output_tokens) for r in fakes.rows] == [("ok", 3)]


def test_one_read_is_one_write() -> None:
    raw = upstream_stream()
    whole, _, _ = relayed(raw)  # the whole stream in one read
    bodies = [m["body"] for m in whole if m["type"] == "http.response.body" and m["body"]]
    assert bodies == [raw]
    split, _, _ = relayed(raw, read_bytes=97)  # reads that end inside events
    pieces = [m["body"] for m in split if m["type"] == "http.response.body" and m["body"]]
    assert b"".join(pieces) == raw and len(pieces) > 3
    assert all(p.endswith(b"\n\n") for p in pieces)  # only whole events go out


def test_the_model_is_renamed_to_the_clients() -> None:
    sent, _, up = relayed(upstream_stream(model="upstream-9"), model="upstream-9")
    assert up.bodies[0]["model"] == "upstream-9"
    frames = [f for f in body_of(sent).split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    chunks = [orjson.loads(f[len(b"data: ") :]) for f in frames[:-1]]
    frames_m = [f for f in upstream_stream().split(b"\n\n") if f][:-1]
    originals = [orjson.loads(f[len(b"data: ") :]) for f in frames_m]
    assert chunks == originals  # the same chunks as an upstream that said "m", field for field


def test_a_client_that_did_not_ask_gets_no_usage_chunk_but_usage_settles() -> None:
    sent, fakes, up = relayed(upstream_stream(), include_usage=False)
    assert up.bodies[0]["stream_options"] == {"include_usage": True}  # asked upstream anyway
    expected = upstream_stream().split(b"\n\n")
    del expected[5]  # the usage-only chunk
    assert body_of(sent) == b"\n\n".join(expected)
    assert fakes.settled == [Usage(input_tokens=7, output_tokens=3, cache_read_tokens=4)]


def test_usage_without_cached_tokens_gets_them() -> None:
    sent, fakes, _ = relayed(upstream_stream(usage=USAGE))
    frames = [f for f in body_of(sent).split(b"\n\n") if f]
    usage = orjson.loads(frames[-2][len(b"data: ") :])["usage"]
    assert usage == {**USAGE, "prompt_tokens_details": {"cached_tokens": 0}}
    assert frames[:-2] == [f for f in upstream_stream(usage=USAGE).split(b"\n\n") if f][:-2]
    assert fakes.settled == [Usage(input_tokens=11, output_tokens=3)]


def test_done_is_added_when_the_upstream_ends_after_a_finish() -> None:
    sent, fakes, _ = relayed(upstream_stream(done=False))
    assert body_of(sent) == upstream_stream()
    assert [r.status for r in fakes.rows] == ["ok"]


@pytest.mark.parametrize("read_bytes", [60, 10_000])  # the error in its own read, or not
def test_an_upstream_error_mid_stream_is_reported_in_band(read_bytes: int) -> None:
    error = b'data: {"error":{"message":"engine overloaded","type":"server_error"}}\n\n'
    raw = upstream_stream()
    head = b"".join(f + b"\n\n" for f in raw.split(b"\n\n")[:2])  # role chunk, first token
    sent, fakes, _ = relayed(head + error, read_bytes=read_bytes)
    out = body_of(sent)
    assert out.startswith(head) and b"[DONE]" not in out
    assert out.endswith(b"\n\n") and b"engine overloaded" in out.split(b"\n\n")[-2]
    assert fakes.settled == [Usage(input_tokens=7, output_tokens=1)]  # "hi": one word counted
    assert [r.status for r in fakes.rows] == ["error"]


def test_a_stream_cut_before_any_finish_is_an_in_band_error() -> None:
    raw = b"".join(f + b"\n\n" for f in upstream_stream().split(b"\n\n")[:3])
    sent, fakes, _ = relayed(raw)
    out = body_of(sent)
    assert out.startswith(raw) and b"stream ended before a finish_reason" in out
    assert fakes.settled == [Usage(input_tokens=7, output_tokens=2)]


def test_a_client_that_leaves_is_recorded_with_what_it_got() -> None:
    async def main() -> tuple[list[MutableMapping[str, Any]], Fakes]:
        up = ScriptedUpstream(upstream_stream(), read_bytes=200, hang_after=3)
        pipeline, fakes, _ = build(backend(up))  # type: ignore[arg-type]
        return await serve(pipeline, request_body(), leave_after=2), fakes

    sent, fakes = asyncio.run(main())
    assert len([m for m in sent if m["type"] == "http.response.body"]) == 2
    (usage,) = fakes.settled  # settled once, with the tokens produced so far
    assert usage.input_tokens == 7 and usage.output_tokens >= 1
    assert [r.status for r in fakes.rows] == ["client_disconnect"]
    assert fakes.completed == [False]


@pytest.mark.parametrize("include_usage", [True, False])
def test_relay_and_reference_path_send_the_same_chunks(include_usage: bool) -> None:
    """Real HTTP to the wire-level fake: the relay against decode-and-re-encode."""

    def strip(raw: bytes) -> list[Any]:
        frames = [f[len(b"data: ") :] for f in raw.split(b"\n\n") if f]
        out = []
        for f in frames:
            parsed = f if f == b"[DONE]" else orjson.loads(f)
            if isinstance(parsed, dict):
                parsed.pop("created")  # the reference path stamps its own clock
                if not include_usage:
                    parsed.pop("usage", None)  # the relay forwards the upstream's `null`s
            out.append(parsed)
        return out

    async def one(up: FakeUpstream, relay: bool) -> tuple[bytes, Fakes]:
        spec = BackendSpec("fake", "openai_compatible", up.openai_base_url)
        session = AiohttpPool()
        try:
            pipeline, fakes, _ = build(OpenAICompatibleBackend(spec, http=session))
            pipeline.s = dataclasses.replace(pipeline.s, relay_streams=relay)
            return body_of(await serve(pipeline, request_body(include_usage))), fakes
        finally:
            await session.aclose()

    with FakeUpstream() as up:
        fast, fast_fakes = asyncio.run(one(up, True))
        ref, ref_fakes = asyncio.run(one(up, False))
    assert [c for c in strip(fast) if c != b"[DONE]"]  # chunks came
    fast_chunks, ref_chunks = strip(fast), strip(ref)
    for c in fast_chunks + ref_chunks:
        if isinstance(c, dict):
            c.pop("id")  # the fake numbers its replies
    assert fast_chunks == ref_chunks
    assert fast_fakes.settled == ref_fakes.settled and fast_fakes.settled[0].output_tokens > 0
