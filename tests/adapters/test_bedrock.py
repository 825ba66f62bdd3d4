"""BedrockBackend against a wire-level fake of the Converse / ConverseStream HTTP API."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Iterator

import pytest

from adapters.backend import BackendCall
from adapters.backends.bedrock import BedrockBackend, build_bedrock_backend, encode_converse
from adapters.backends.spec import BackendSpec
from adapters.errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from adapters.types import (
    CacheControl,
    ChatRequest,
    ImagePart,
    Message,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
    Usage,
)
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from tests.fakes.bedrock import Failure, FakeBedrock, Reply

MODEL_ID = "anthropic.claude-sonnet-4-5-v1:0"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The standard credential chain, fed from the environment only (no files, no IMDS)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLANTERNTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")


@pytest.fixture
def fake(aws_env: None) -> Iterator[FakeBedrock]:
    server = FakeBedrock(region="eu-west-1", clock=Clock()).start()
    yield server
    server.stop()


def backend(fake: FakeBedrock, region: str = "eu-west-1") -> BedrockBackend:
    return BedrockBackend("bedrock", MODEL_ID, region, endpoint_url=fake.url, timeout_s=10)


SYSTEM = (TextPart("you are a careful agent " * 10),)  # 50 words
TOOLS = (ToolSpec("search", "find documents", {"type": "object"}),)  # 1 + 2 + 3 = 6 tokens


def conversation(*turns: str) -> ChatRequest:
    messages = []
    for i, text in enumerate(turns):
        messages.append(Message("user" if i % 2 == 0 else "assistant", (TextPart(text),)))
    return ChatRequest(
        model="claude",
        messages=tuple(messages),
        system=SYSTEM,
        tools=TOOLS,
        max_tokens=64,
        temperature=0.0,
    )


def run(coro):
    return asyncio.run(coro)


def test_converse_caches_the_prefix_and_maps_usage(fake: FakeBedrock) -> None:
    b = backend(fake)
    first = run(b.complete(BackendCall(conversation("what is in the report"), "openai")))
    assert first.content == (TextPart("hello from the fake"),)
    assert first.stop_reason == "stop"
    # tools 6 + system 50 + user 5 = 61 prompt tokens, all written at the last cache point
    assert first.usage == Usage(
        input_tokens=0, output_tokens=4, cache_read_tokens=0, cache_write_tokens=61
    )
    body = fake.requests[0]["body"]
    assert body["toolConfig"]["tools"][-1] == {"cachePoint": {"type": "default"}}
    assert body["system"][-1] == {"cachePoint": {"type": "default"}}
    assert body["messages"][-1]["content"][-1] == {"cachePoint": {"type": "default"}}
    assert body["inferenceConfig"] == {"maxTokens": 64, "temperature": 0.0}
    assert fake.requests[0]["path"] == f"/model/{MODEL_ID.replace(':', '%3A')}/converse"
    second = run(
        b.complete(
            BackendCall(
                conversation("what is in the report", "it lists four items", "summarise them"),
                "openai",
            )
        )
    )
    # the previous prompt (61) is read; the new turns (4 + 2) are written
    assert second.usage == Usage(
        input_tokens=0, output_tokens=4, cache_read_tokens=61, cache_write_tokens=6
    )
    assert second.id == "bedrock-req-2"


def test_cache_expires_after_its_ttl(fake: FakeBedrock) -> None:
    b = backend(fake)
    run(b.complete(BackendCall(conversation("hello there"), "openai")))
    fake.clock.now += 301  # type: ignore[attr-defined]
    again = run(b.complete(BackendCall(conversation("hello there"), "openai")))
    assert (again.usage.cache_read_tokens, again.usage.cache_write_tokens) == (0, 58)


def test_without_cache_points_everything_is_plain_input(fake: FakeBedrock) -> None:
    b = BedrockBackend("bedrock", MODEL_ID, "eu-west-1", endpoint_url=fake.url, cache_points=False)
    reply = run(b.complete(BackendCall(conversation("hello there"), "openai")))
    assert reply.usage == Usage(input_tokens=58, output_tokens=4)
    assert "cachePoint" not in str(fake.requests[0]["body"])


def test_tool_use_and_results_round_trip(fake: FakeBedrock) -> None:
    fake.replies.append(
        Reply(text="", tool_use=("tu-1", "search", {"q": "q3 sales"}), stop_reason="tool_use")
    )
    b = backend(fake)
    reply = run(b.complete(BackendCall(conversation("find q3 sales"), "openai")))
    assert reply.content == (ToolUsePart("tu-1", "search", '{"q":"q3 sales"}'),)
    assert reply.stop_reason == "tool_use"
    follow = ChatRequest(
        model="claude",
        system=SYSTEM,
        tools=TOOLS,
        messages=(
            Message("user", (TextPart("find q3 sales"),)),
            Message("assistant", reply.content),
            Message("tool", (ToolResultPart("tu-1", (TextPart("12 rows"),)),)),
            Message("user", (TextPart("and q4?"),)),
        ),
    )
    run(b.complete(BackendCall(follow, "openai")))
    messages = fake.requests[1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"toolUse": {"toolUseId": "tu-1", "name": "search", "input": {"q": "q3 sales"}}}
    ]
    assert messages[2]["content"][:2] == [
        {
            "toolResult": {
                "toolUseId": "tu-1",
                "content": [{"text": "12 rows"}],
                "status": "success",
            }
        },
        {"text": "and q4?"},
    ]


def test_stream_yields_canonical_events_with_usage(fake: FakeBedrock) -> None:
    fake.replies.append(
        Reply(text="two words", tool_use=("tu-9", "search", {"q": "x"}), stop_reason="tool_use")
    )

    async def collect():
        return [e async for e in backend(fake).stream(BackendCall(conversation("go"), "openai"))]

    events = run(collect())
    assert events[0] == StreamStart("bedrock-req-1", MODEL_ID)
    assert events[1:3] == [TextDelta(0, "two"), TextDelta(0, " words")]
    assert events[3] == ToolCallStart(1, "tu-9", "search")
    assert "".join(e.arguments_json for e in events if isinstance(e, ToolCallDelta)) == '{"q": "x"}'
    assert events[-1] == StreamEnd("tool_use", Usage(0, 4, 0, 57))


@pytest.mark.parametrize("reason", ["guardrail_intervened", "content_filtered"])
def test_a_filtered_reply_says_so_to_either_client(fake: FakeBedrock, reason: str) -> None:
    """A guardrail's or content filter's stop is OpenAI's `content_filter` and Anthropic's
    `refusal`, streamed and not: a client must not take the guardrail's text for an answer."""
    blocked = "Sorry, the model cannot answer this question."
    fake.replies += [Reply(text=blocked, stop_reason=reason)] * 2
    b = backend(fake)
    reply = run(b.complete(BackendCall(conversation("go"), "openai")))

    async def collect():
        return [e async for e in b.stream(BackendCall(conversation("go"), "anthropic"))]

    end = run(collect())[-1]
    assert isinstance(end, StreamEnd)
    assert (reply.content, reply.stop_reason, end.stop_reason) == (
        (TextPart(blocked),),
        "error",
        "error",
    )
    assert openai_wire.encode_response(reply)["choices"][0]["finish_reason"] == "content_filter"
    assert anthropic_wire.encode_response(reply)["stop_reason"] == "refusal"


@pytest.mark.parametrize(
    ("failure", "error", "retryable"),
    [
        (Failure(429, "ThrottlingException"), ProviderRateLimited, True),
        (Failure(503, "ServiceUnavailableException"), ProviderUnavailable, True),
        (Failure(500, "InternalServerException"), ProviderUnavailable, True),
        (Failure(400, "ValidationException"), ProviderRejected, False),
    ],
)
def test_http_errors_map_to_typed_errors(fake: FakeBedrock, failure, error, retryable) -> None:
    for streaming in (False, True):
        fake.failures.append(failure)
        b = backend(fake)

        with pytest.raises(error) as caught:
            run(_drive(b, streaming))
        assert caught.value.retryable is retryable
        assert caught.value.upstream_status == failure.status
        # AWS's request id, which the client gets as its SDK's request-id header
        assert caught.value.provider == ProviderError(request_id=f"req-{len(fake.requests)}")


async def _drive(b: BedrockBackend, streaming: bool) -> None:
    if streaming:
        async for _ in b.stream(BackendCall(conversation("hi"), "openai")):
            pass
    else:
        await b.complete(BackendCall(conversation("hi"), "openai"))


def test_mid_stream_throttling_raises_after_the_first_delta(fake: FakeBedrock) -> None:
    fake.failures.append(Failure(429, "ThrottlingException", mid_stream=True))
    seen = []

    async def consume() -> None:
        async for event in backend(fake).stream(BackendCall(conversation("hi"), "openai")):
            seen.append(event)

    with pytest.raises(ProviderRateLimited):
        run(consume())
    assert seen == [StreamStart("bedrock-req-1", MODEL_ID), TextDelta(0, "hello")]


def test_sigv4_scope_names_the_region(fake: FakeBedrock) -> None:
    with pytest.raises(ProviderRejected) as caught:
        run(backend(fake, region="us-west-2").complete(BackendCall(conversation("hi"), "openai")))
    assert caught.value.upstream_status == 403
    assert "Credential=AKIDLANTERNTEST/" in fake.requests[0]["auth"]


def test_each_request_carries_its_own_calls_traceparent(fake: FakeBedrock) -> None:
    """The attempt's `traceparent` (the call's extra headers) goes out through botocore's
    hook, on Converse and ConverseStream; a call without one sends none, though the client
    and its threads are shared."""
    b = backend(fake)
    plain = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    streamed = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"

    async def calls() -> None:
        request = conversation("hi")
        await b.complete(BackendCall(request, "openai", extra_headers={"traceparent": plain}))
        headers = {"traceparent": streamed}
        async for _ in b.stream(BackendCall(request, "openai", extra_headers=headers)):
            pass
        await b.complete(BackendCall(request, "openai"))

    run(calls())
    assert [r["traceparent"] for r in fake.requests] == [plain, streamed, None]
    assert [r["path"].rsplit("/", 1)[1] for r in fake.requests] == [
        "converse",
        "converse-stream",
        "converse",
    ]


def test_factory_entry_takes_region_from_the_aws_chain(fake: FakeBedrock) -> None:
    spec = BackendSpec(name="br", kind="bedrock", base_url=fake.url, model=MODEL_ID)
    b = build_bedrock_backend(spec)
    reply = run(b.complete(BackendCall(conversation("hi"), "openai")))  # AWS_DEFAULT_REGION
    assert reply.usage.output_tokens == 4
    run(b.aclose())


def test_explicit_markers_are_honoured_and_capped_at_four() -> None:
    cc = CacheControl(ttl="1h")
    parts = tuple(TextPart(f"part {i}", cache_control=cc) for i in range(6))
    image = ImagePart(media_type="image/png", data_b64=base64.b64encode(b"\x89PNG").decode())
    req = ChatRequest(model="m", messages=(Message("user", (*parts, image)),))
    kwargs = encode_converse("br", MODEL_ID, req, cache_points=True)
    content = kwargs["messages"][0]["content"]
    points = [c for c in content if "cachePoint" in c]
    assert points == [{"cachePoint": {"type": "default", "ttl": "1h"}}] * 4
    assert content[-1] == {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}


def test_image_urls_are_rejected_before_any_call() -> None:
    req = ChatRequest(model="m", messages=(Message("user", (ImagePart(url="http://x/y.png"),)),))
    with pytest.raises(ProviderRejected):
        encode_converse("br", MODEL_ID, req, cache_points=True)


def test_a_json_schema_format_goes_through_boto3_as_output_config(fake: FakeBedrock) -> None:
    """Through the real client (botocore validates the shape): Converse's structured outputs."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
    request = dataclasses.replace(
        conversation("where is it"), extra={"response_format": response_format}
    )
    run(backend(fake).complete(BackendCall(request, "openai")))
    sent = fake.requests[0]["body"]["outputConfig"]["textFormat"]
    assert sent["type"] == "json_schema"
    assert json.loads(sent["structure"]["jsonSchema"]["schema"]) == schema
