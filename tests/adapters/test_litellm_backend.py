"""The LiteLLM backend through LiteLLM's real code path, against the fake OpenAI and Anthropic
servers (`api_base` pointing at them)."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest

from adapters.backend import Backend, BackendCall, serves_embeddings
from adapters.backends import BackendSpec, build_backend
from adapters.errors import (
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    WireFormatError,
)
from adapters.http.upstream import HttpxPool
from adapters.types import StreamEnd, TextDelta, TextPart, ToolCallStart, ToolUsePart, Usage
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from tests.fakes.embeddings import FakeEmbeddings, vector
from tests.fakes.upstream import FakeUpstream

T = TypeVar("T")
FOX = "The quick brown fox jumps over the lazy dog"
HI = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def run(spec: BackendSpec, use: Callable[[Backend], Awaitable[T]]) -> T:
    async def main() -> T:
        async with httpx.AsyncClient() as http:
            return await use(build_backend(spec, http=HttpxPool(http)))

    return asyncio.run(main())


async def collect(backend: Backend, call: BackendCall) -> list[Any]:
    return [event async for event in backend.stream(call)]


def via_openai(up: FakeUpstream, **kw: Any) -> BackendSpec:
    return BackendSpec(
        "ll-openai",
        "litellm",
        up.openai_base_url,
        model="openai/gpt-4o-mini",
        api_key="sk-test",
        **kw,
    )


def via_anthropic(up: FakeUpstream, **kw: Any) -> BackendSpec:
    return BackendSpec(
        "ll-claude",
        "litellm",
        up.base_url,
        model="anthropic/claude-sonnet-4-5",
        api_key="sk-ant",
        **kw,
    )


def call_of(body: dict[str, Any], **kw: Any) -> BackendCall:
    return BackendCall(openai_wire.decode_request(body), "openai", body, **kw)


def test_openai_provider_complete_and_stream(upstream: FakeUpstream) -> None:
    resp = run(via_openai(upstream), lambda b: b.complete(call_of(HI)))
    assert (resp.content, resp.stop_reason, resp.usage) == ((TextPart(FOX),), "stop", Usage(8, 9))
    events = run(via_openai(upstream), lambda b: collect(b, call_of(dict(HI, stream=True))))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == FOX
    assert events[-1] == StreamEnd("stop", Usage(8, 9))
    sent = upstream.requests[-1].json()
    assert sent["model"] == "gpt-4o-mini" and sent["stream"] is True


def test_anthropic_provider_maps_cache_usage(cached_upstream: tuple[FakeUpstream, Any]) -> None:
    up, cache = cached_upstream
    body = {
        "model": "claude",
        "max_tokens": 100,
        "messages": [
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": FOX * 10, "cache_control": {"type": "ephemeral"}}
                ],
            },
            {"role": "user", "content": "hello"},
        ],
    }
    resp = run(via_anthropic(up), lambda b: b.complete(call_of(body)))
    ((wire, prompt),) = cache.calls
    assert wire == "anthropic"
    read = prompt // 2
    assert resp.usage == Usage(prompt - read - 3, 9, read, 3)
    assert resp.content == (TextPart(FOX),)
    sent = up.requests[0].json()
    assert sent["system"] == [
        {"type": "text", "text": FOX * 10, "cache_control": {"type": "ephemeral"}}
    ]
    events = run(via_anthropic(up), lambda b: collect(b, call_of(dict(body, stream=True))))
    assert events[-1] == StreamEnd("stop", Usage(prompt - read - 3, 9, read, 3))


def test_anthropic_client_tool_call_through_litellm(upstream: FakeUpstream) -> None:
    raw = {
        "model": "claude",
        "max_tokens": 50,
        "tools": [
            {
                "name": "lookup",
                "description": "Look up",
                "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
        ],
        "messages": [{"role": "user", "content": "call:lookup please"}],
    }
    call = BackendCall(anthropic_wire.decode_request(raw), "anthropic", raw)
    resp = run(via_anthropic(upstream), lambda b: b.complete(call))
    assert resp.stop_reason == "tool_use"
    assert resp.content == (
        ToolUsePart("call_fake_000001", "lookup", '{"text": "call:lookup please"}'),
    )
    events = run(via_anthropic(upstream), lambda b: collect(b, call))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.id, s.name) for s in starts] == [("call_fake_000002", "lookup")]
    assert events[-1].stop_reason == "tool_use"


def test_errors_map_to_our_types(upstream: FakeUpstream) -> None:
    upstream.fail_next(status=500)
    with pytest.raises(ProviderUnavailable):
        run(via_openai(upstream), lambda b: b.complete(call_of(HI)))
    upstream.fail_next(status=429, retry_after="4")
    with pytest.raises(ProviderRateLimited) as info:
        run(via_openai(upstream), lambda b: b.complete(call_of(HI)))
    assert info.value.retry_after_s == 4.0
    upstream.fail_next(status=400)
    with pytest.raises(ProviderRejected):
        run(via_anthropic(upstream), lambda b: b.complete(call_of(HI)))
    upstream.fail_next(status=529)
    with pytest.raises(ProviderUnavailable):
        run(via_anthropic(upstream), lambda b: collect(b, call_of(dict(HI, stream=True))))
    assert len(upstream.requests) == 4  # no hidden retries inside LiteLLM


def test_timeout_maps_to_provider_timeout(upstream: FakeUpstream) -> None:
    upstream.app.delay_s = 1.5
    with pytest.raises(ProviderTimeout):
        run(via_openai(upstream, timeout_s=0.3), lambda b: b.complete(call_of(HI)))


def test_embeddings_through_litellm_as_openai_shapes_them() -> None:
    """`aembedding` on LiteLLM's real OpenAI path to the embeddings fake: vectors in order,
    the provider's token count, base64 when asked; a field OpenAI's API lacks is refused by
    name, one the provider cannot take is LiteLLM's 400, never dropped."""
    with FakeEmbeddings() as fake:
        spec = BackendSpec("ll-embed", "litellm", fake.base_url, model="openai/te3", api_key="k")

        async def embed(backend: Backend, body: dict[str, Any]) -> Any:
            return await backend.embed(body, 10)  # type: ignore[attr-defined]

        reply = run(spec, lambda b: embed(b, {"model": "small", "input": ["a b c", "d e"]}))
        assert reply.prompt_tokens == 5
        assert [d["embedding"] for d in reply.body["data"]] == [vector("a b c"), vector("d e")]
        assert reply.body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
        assert reply.body["model"] == "small"
        asked = {"model": "small", "input": "x y", "encoding_format": "base64"}
        encoded = run(spec, lambda b: embed(b, asked)).body["data"][0]["embedding"]
        raw = base64.b64decode(encoded)
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == vector("x y")
        before = len(fake.app.requests)
        with pytest.raises(WireFormatError) as unknown:
            run(spec, lambda b: embed(b, {"input": "x", "input_type": "query"}))
        assert unknown.value.field == "input_type"
        with pytest.raises(ProviderRejected, match="dimensions"):
            run(spec, lambda b: embed(b, {"input": "x", "dimensions": 2}))
        assert len(fake.app.requests) == before


@pytest.mark.parametrize(
    ("model", "embeds"),
    [
        ("openai/gpt-4o-mini", False),  # LiteLLM's map: a chat model
        ("anthropic/claude-sonnet-4-5", False),
        ("text-embedding-3-small", True),
        ("bedrock/amazon.titan-embed-text-v2:0", True),
        ("openai/te3", True),  # not in the map: the provider decides
        (None, True),  # the client's model, named per call
    ],
)
def test_a_model_litellm_knows_as_a_chat_model_does_not_embed(
    model: str | None, embeds: bool
) -> None:
    spec = BackendSpec("ll", "litellm", "http://127.0.0.1:9", model=model, api_key="k")
    assert serves_embeddings(build_backend(spec, http=HttpxPool(httpx.AsyncClient()))) is embeds


def test_embeddings_through_litellm_carry_the_calls_traceparent() -> None:
    """The call's headers (its `traceparent`, while tracing) reach the upstream through
    LiteLLM's `extra_headers`; none are added when there are none."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with FakeEmbeddings() as fake:
        spec = BackendSpec("ll-embed", "litellm", fake.base_url, model="openai/te3", api_key="k")

        async def embed(backend: Backend, headers: dict[str, str] | None) -> Any:
            body = {"model": "small", "input": "a b"}
            return await backend.embed(body, 10, headers)  # type: ignore[attr-defined]

        run(spec, lambda b: embed(b, {"traceparent": traceparent}))
        run(spec, lambda b: embed(b, None))
        sent = [r.headers.get("traceparent") for r in fake.app.requests]
        assert sent == [traceparent, None]
