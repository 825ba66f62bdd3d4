"""OpenAI-compatible and Anthropic backends against the wire-level fake upstream (real HTTP)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import orjson
import pytest

from adapters.backend import Backend, BackendCall, serves_embeddings
from adapters.backends import BackendSpec, build_backend
from adapters.backends.anthropic_native import messages_url
from adapters.errors import (
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
)
from adapters.http.aiohttp_pool import AiohttpPool
from adapters.http.http1.pool import Http1Pool
from adapters.http.upstream import HttpxPool, parse_retry_after
from adapters.types import (
    ChatResponse,
    PublicHead,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
    Usage,
)
from adapters.wire import openai as openai_wire
from tests.fakes.upstream import FakeUpstream

T = TypeVar("T")
HI = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
SEARCH_TOOL = {
    "type": "function",
    "function": {"name": "search", "description": "Search", "parameters": {"type": "object"}},
}
FOX = "The quick brown fox jumps over the lazy dog"


Runner = Callable[[BackendSpec, Callable[[Backend], Awaitable[Any]]], Any]


@pytest.fixture(params=["httpx", "aiohttp", "http1"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Builds the backend on a fresh pool of the given client library and runs `use` on it."""

    def runner(spec: BackendSpec, use: Callable[[Backend], Awaitable[T]]) -> T:
        async def main() -> T:
            if request.param == "httpx":
                async with httpx.AsyncClient() as http:
                    return await use(build_backend(spec, http=HttpxPool(http)))
            if request.param == "http1":
                pool = Http1Pool()
                try:
                    return await use(build_backend(spec, http=pool))
                finally:
                    await pool.aclose()
            session = AiohttpPool()
            try:
                return await use(build_backend(spec, http=session))
            finally:
                await session.aclose()

        return asyncio.run(main())

    return runner


def openai_call(body: dict[str, Any], **kw: Any) -> BackendCall:
    return BackendCall(openai_wire.decode_request(body), "openai", body, **kw)


async def collect(backend: Backend, call: BackendCall) -> list[StreamEvent]:
    return [event async for event in backend.stream(call)]


def local(up: FakeUpstream, **kw: Any) -> BackendSpec:
    return BackendSpec("local", "openai_compatible", up.openai_base_url, **kw)


def anthropic(up: FakeUpstream, **kw: Any) -> BackendSpec:
    return BackendSpec("claude", "anthropic", up.base_url, api_key="sk-ant-test", **kw)


def test_openai_complete_and_stream(run: Runner, upstream: FakeUpstream) -> None:
    spec = local(upstream)
    resp = run(spec, lambda b: b.complete(openai_call(HI)))
    assert resp == ChatResponse(
        "chatcmpl-fake-000001",
        "gpt-4o-mini",
        (TextPart(FOX),),
        "stop",
        Usage(input_tokens=8, output_tokens=9),
    )
    events = run(spec, lambda b: collect(b, openai_call(dict(HI, stream=True))))
    words = FOX.split(" ")
    assert events == [
        StreamStart("chatcmpl-fake-000002", "gpt-4o-mini"),
        TextDelta(0, words[0]),
        *[TextDelta(0, " " + w) for w in words[1:]],
        StreamEnd("stop", Usage(8, 9)),
    ]


def test_raw_body_is_forwarded_exactly(run: Runner, upstream: FakeUpstream) -> None:
    raw = {
        "messages": [{"role": "user", "content": "hi", "name": "x"}],
        "model": "gpt-4o-mini",
        "top_k": 4,
        "seed": 1,
        "logit_bias": {"50256": -100},
        "max_tokens": 3,
    }
    run(local(upstream), lambda b: b.complete(openai_call(raw)))
    assert upstream.requests[0].body == orjson.dumps(raw)
    run(local(upstream, model="smollm2"), lambda b: collect(b, openai_call(dict(raw, stream=True))))
    assert upstream.requests[1].json() == dict(
        raw, model="smollm2", stream=True, stream_options={"include_usage": True}
    )


def test_cache_salt_and_session_header(run: Runner, upstream: FakeUpstream) -> None:
    request = openai_wire.decode_request(dict(HI, cache_salt="tenant-a"))
    call = BackendCall(dataclasses.replace(request, session_id="sess-1"), "anthropic")
    run(local(upstream, extra={"engine": "vllm"}), lambda b: b.complete(call))
    sent = upstream.requests[0]
    assert sent.json()["cache_salt"] == "tenant-a"
    assert sent.headers["x-session-id"] == "sess-1"
    run(
        local(upstream, extra={"engine": "vllm", "send_cache_salt": False}),
        lambda b: b.complete(call),
    )
    assert "cache_salt" not in upstream.requests[1].json()


@pytest.mark.parametrize(
    ("extra", "kind", "sent"),
    [
        ({}, "openai_compatible", False),  # an undeclared server: no field it may reject
        ({"engine": "other"}, "openai_compatible", False),
        ({"engine": "sglang"}, "openai_compatible", True),
        ({"engine": "lantern"}, "openai_compatible", True),
        ({"engine": "other", "send_cache_salt": True}, "openai_compatible", True),
        ({}, "selfhost", True),  # the bundled engine
    ],
)
def test_cache_salt_goes_only_to_servers_that_accept_it(
    run: Runner, upstream: FakeUpstream, extra: dict[str, Any], kind: str, sent: bool
) -> None:
    request = openai_wire.decode_request(dict(HI, cache_salt="tenant-a"))
    spec = BackendSpec("local", kind, upstream.openai_base_url, extra=extra)  # type: ignore[arg-type]
    run(spec, lambda b: b.complete(BackendCall(request, "anthropic")))
    assert ("cache_salt" in upstream.requests[0].json()) is sent


def test_public_head_goes_only_to_the_bundled_engine_and_no_cache_field_from_the_client(
    run: Runner, upstream: FakeUpstream
) -> None:
    raw = dict(HI, lantern_public={"tools": 9, "system": 9}, cache_salt="")  # the client's own
    request = dataclasses.replace(
        openai_wire.decode_request(HI), cache_salt="tenant-a", cache_public=PublicHead(1, 2)
    )
    call = BackendCall(request, "openai", raw_body=raw)
    for extra in ({"engine": "lantern"}, {"engine": "vllm"}, {"engine": "other"}):
        run(local(upstream, extra=extra), lambda b: b.complete(call))
    bodies = [r.json() for r in upstream.requests]
    assert [b.get("lantern_public") for b in bodies] == [{"tools": 1, "system": 2}, None, None]
    assert [b.get("cache_salt") for b in bodies] == ["tenant-a", "tenant-a", None]
    no_head = dataclasses.replace(call, request=dataclasses.replace(request, cache_public=None))
    run(local(upstream, extra={"engine": "lantern"}), lambda b: b.complete(no_head))
    assert "lantern_public" not in upstream.requests[-1].json()


def test_prompt_cache_usage_passes_through(
    run: Runner, cached_upstream: tuple[FakeUpstream, Any]
) -> None:
    up, cache = cached_upstream
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": FOX * 20}]}
    resp = run(local(up), lambda b: b.complete(openai_call(body)))
    assert cache.calls == [("openai", 187)]
    assert resp.usage == Usage(
        input_tokens=91, output_tokens=9, cache_read_tokens=93, cache_write_tokens=3
    )
    events = run(anthropic(up), lambda b: collect(b, openai_call(dict(body, stream=True))))
    assert cache.calls[1] == ("anthropic", 187)  # same canonical request, same count
    assert events[-1] == StreamEnd("stop", Usage(91, 9, 93, 3))


def test_upstream_5xx_is_unavailable(run: Runner, upstream: FakeUpstream) -> None:
    upstream.fail_next(status=503, count=2)
    with pytest.raises(ProviderUnavailable) as info:
        run(local(upstream), lambda b: b.complete(openai_call(HI)))
    assert info.value.upstream_status == 503
    assert info.value.detail == "HTTP 503: injected failure"
    with pytest.raises(ProviderUnavailable):
        run(local(upstream), lambda b: collect(b, openai_call(dict(HI, stream=True))))
    assert run(local(upstream), lambda b: b.complete(openai_call(HI))).stop_reason == "stop"


def test_slow_upstream_times_out(run: Runner, upstream: FakeUpstream) -> None:
    upstream.app.hold = threading.Event()  # no reply starts before the test ends
    try:
        with pytest.raises(ProviderTimeout):
            run(local(upstream), lambda b: b.complete(openai_call(HI, timeout_s=0.2)))
        with pytest.raises(ProviderTimeout):
            run(
                anthropic(upstream, timeout_s=0.2),
                lambda b: collect(b, openai_call(dict(HI, stream=True))),
            )
    finally:
        upstream.app.hold.set()  # the held handlers end, so the server stops at once


def test_rate_limit_carries_retry_after(run: Runner, upstream: FakeUpstream) -> None:
    upstream.fail_next(status=429, retry_after="7")
    with pytest.raises(ProviderRateLimited) as info:
        run(local(upstream), lambda b: b.complete(openai_call(HI)))
    assert info.value.retry_after_s == 7.0
    upstream.fail_next(status=429, retry_after="2")
    with pytest.raises(ProviderRateLimited) as info:
        run(anthropic(upstream), lambda b: collect(b, openai_call(dict(HI, stream=True))))
    assert info.value.retry_after_s == 2.0
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None


def test_client_errors_are_rejected_and_not_retryable(run: Runner, upstream: FakeUpstream) -> None:
    bad = {"model": "gpt-4o-mini", "messages": "not a list"}
    call = BackendCall(openai_wire.decode_request(HI), "openai", bad)
    with pytest.raises(ProviderRejected) as info:
        run(local(upstream), lambda b: b.complete(call))
    assert (info.value.upstream_status, info.value.retryable) == (400, False)
    assert info.value.detail == "HTTP 400: messages: expected list"


def test_connection_refused_is_unavailable(run: Runner) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spec = BackendSpec("gone", "openai_compatible", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderUnavailable):
        run(spec, lambda b: b.complete(openai_call(HI)))


def test_api_keys_and_anthropic_headers(run: Runner) -> None:
    with FakeUpstream(api_key="sk-ant-test") as up:
        run(anthropic(up), lambda b: b.complete(openai_call(HI)))
        headers = up.requests[0].headers
        assert (headers["x-api-key"], headers["anthropic-version"]) == ("sk-ant-test", "2023-06-01")
        with pytest.raises(ProviderRejected) as info:
            run(local(up, api_key="wrong"), lambda b: b.complete(openai_call(HI)))
        assert info.value.upstream_status == 401
        run(local(up, api_key="sk-ant-test"), lambda b: b.complete(openai_call(HI)))
        assert up.requests[2].headers["authorization"] == "Bearer sk-ant-test"
    assert messages_url("https://api.anthropic.com/") == "https://api.anthropic.com/v1/messages"
    assert messages_url("http://h:1/v1") == "http://h:1/v1/messages"


def test_openai_client_with_tools_through_anthropic_backend(
    run: Runner, upstream: FakeUpstream
) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "tools": [SEARCH_TOOL],
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "please call:search now"}],
    }
    resp = run(anthropic(upstream), lambda b: b.complete(openai_call(body)))
    args = '{"text":"please call:search now"}'
    assert resp.content == (ToolUsePart("call_fake_000001", "search", args),)
    assert resp.stop_reason == "tool_use"
    sent = upstream.requests[0].json()
    assert sent["tools"] == [
        {"name": "search", "description": "Search", "input_schema": {"type": "object"}}
    ]
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "please call:search now"}]}
    ]
    events = run(anthropic(upstream), lambda b: collect(b, openai_call(dict(body, stream=True))))
    assert events[1:4] == [
        ToolCallStart(0, "call_fake_000002", "search"),
        ToolCallDelta(0, args[:16]),
        ToolCallDelta(0, args[16:]),
    ]
    assert events[-1].stop_reason == "tool_use"  # type: ignore[union-attr]


def test_anthropic_raw_body_is_forwarded(run: Runner, upstream: FakeUpstream) -> None:
    from adapters.wire import anthropic as anthropic_wire

    raw = {
        "model": "claude-haiku-4-5",
        "max_tokens": 4,
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "sig"},
                    {"type": "text", "text": "hi"},
                ],
            }
        ],
    }
    call = BackendCall(anthropic_wire.decode_request(raw), "anthropic", raw)
    resp = run(anthropic(upstream), lambda b: b.complete(call))
    assert upstream.requests[0].body == orjson.dumps(raw)
    assert (resp.content, resp.stop_reason) == ((TextPart("The quick brown fox"),), "length")


@pytest.mark.parametrize(("engine", "sent"), [("lantern", 5), ("vllm", 5), ("other", None)])
def test_an_anthropic_clients_top_k_goes_to_the_engines_that_take_it(
    run: Runner, upstream: FakeUpstream, engine: str, sent: int | None
) -> None:
    from adapters.wire import anthropic as anthropic_wire

    raw = {
        "model": "m",
        "max_tokens": 4,
        "top_k": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    call = BackendCall(anthropic_wire.decode_request(raw), "anthropic", raw)
    run(local(upstream, extra={"engine": engine}), lambda b: b.complete(call))
    assert upstream.requests[0].json().get("top_k") == sent


def test_stream_cut_short_is_unavailable(run: Runner, upstream: FakeUpstream) -> None:
    upstream.app.drop_stream_after = 3
    seen: list[StreamEvent] = []

    async def drain(backend: Backend) -> None:
        async for event in backend.stream(openai_call(dict(HI, stream=True))):
            seen.append(event)

    for spec in (local(upstream), anthropic(upstream)):
        seen.clear()
        with pytest.raises(ProviderUnavailable) as info:
            run(spec, drain)
        assert "stream ended before" in info.value.detail
        assert seen[1:] == [TextDelta(0, "The"), TextDelta(0, " quick")]


def test_which_http_backends_serve_embeddings(run: Runner, upstream: FakeUpstream) -> None:
    """An OpenAI-compatible server does; the bundled engine (no `/embeddings`) and Anthropic
    do not, so the gateway answers 400 naming the model instead of calling them."""

    async def embeds(backend: Backend) -> bool:
        return serves_embeddings(backend)

    assert run(local(upstream), embeds)
    assert not run(dataclasses.replace(local(upstream), kind="selfhost"), embeds)
    assert not run(anthropic(upstream), embeds)
