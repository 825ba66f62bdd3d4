"""Bedrock embedding models (Titan, Cohere) through boto3's InvokeModel, against the wire-level
Bedrock fake: OpenAI bodies in, OpenAI replies out, tokens as Bedrock bills them."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Iterator

import pytest

from adapters.backend import serves_embeddings
from adapters.backends.bedrock import (
    BedrockBackend,
    BedrockEmbeddingBackend,
    build_bedrock_backend,
)
from adapters.backends.bedrock.embeddings import embedding_family
from adapters.backends.spec import BackendSpec
from adapters.errors import ProviderRateLimited, WireFormatError
from tests.fakes.bedrock import Failure, FakeBedrock, embedding

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[FakeBedrock]:
    """The standard credential chain, fed from the environment only (no files, no IMDS)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDLANTERNTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server = FakeBedrock(region="eu-west-1").start()
    yield server
    server.stop()


def build(fake: FakeBedrock, model_id: str, **extra: str) -> BedrockBackend:
    spec = BackendSpec(
        "emb", "bedrock", base_url=fake.url, model=model_id, extra={"region": "eu-west-1", **extra}
    )
    return build_bedrock_backend(spec)


def embed(backend: BedrockBackend, body: dict) -> dict:
    assert isinstance(backend, BedrockEmbeddingBackend)
    reply = asyncio.run(backend.embed(body, 10))
    assert reply.body["usage"]["prompt_tokens"] == reply.prompt_tokens  # type: ignore[index]
    return dict(reply.body)


def test_titan_embeds_one_text_per_invoke_and_sums_the_tokens(fake: FakeBedrock) -> None:
    backend = build(fake, TITAN)
    body = {"model": "titan", "input": ["a b c", "d e"], "dimensions": 256}
    reply = embed(backend, body)
    assert [d["embedding"] for d in reply["data"]] == [
        embedding("a b c", 256),
        embedding("d e", 256),
    ]
    assert [d["index"] for d in reply["data"]] == [0, 1]
    assert reply["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert reply["model"] == "titan"
    sent = sorted(r["body"]["inputText"] for r in fake.requests)
    assert sent == ["a b c", "d e"]
    assert {r["path"] for r in fake.requests} == {"/model/amazon.titan-embed-text-v2%3A0/invoke"}
    assert all(r["body"]["dimensions"] == 256 for r in fake.requests)
    assert all("eu-west-1/bedrock/aws4_request" in r["auth"] for r in fake.requests)


def test_base64_vectors_are_little_endian_float32(fake: FakeBedrock) -> None:
    reply = embed(build(fake, TITAN), {"input": "one two", "encoding_format": "base64"})
    raw = base64.b64decode(reply["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == embedding("one two", 1024)


def test_cohere_embeds_96_texts_per_call_with_the_configured_input_type(
    fake: FakeBedrock,
) -> None:
    backend = build(fake, "us." + COHERE, input_type="search_query")
    texts = [f"text number {i}" for i in range(100)]
    reply = embed(backend, {"model": "cohere", "input": texts})
    assert [d["embedding"] for d in reply["data"]] == [embedding(t, 1024) for t in texts]
    assert reply["usage"]["prompt_tokens"] == 300  # from the reply's token-count header
    assert sorted(len(r["body"]["texts"]) for r in fake.requests) == [4, 96]
    assert {r["body"]["input_type"] for r in fake.requests} == {"search_query"}


@pytest.mark.parametrize(
    ("model_id", "body", "field"),
    [
        (TITAN, {"input": [1, 2, 3]}, "input"),
        (TITAN, {"input": []}, "input"),
        (TITAN, {"input": "x", "encoding_format": "int8"}, "encoding_format"),
        (TITAN, {"input": "x", "user": "u-1"}, "user"),
        ("amazon.titan-embed-text-v1", {"input": "x", "dimensions": 256}, "dimensions"),
        (COHERE, {"input": "x", "dimensions": 256}, "dimensions"),
    ],
)
def test_what_bedrock_cannot_honour_is_refused_by_name_before_any_call(
    fake: FakeBedrock, model_id: str, body: dict, field: str
) -> None:
    with pytest.raises(WireFormatError) as refused:
        asyncio.run(build(fake, model_id).embed(body, 10))  # type: ignore[attr-defined]
    assert refused.value.field == field
    assert fake.requests == []


def test_a_bedrock_refusal_or_throttle_maps_to_the_adapter_errors(fake: FakeBedrock) -> None:
    backend = build(fake, TITAN)
    fake.failures.append(Failure(429, "ThrottlingException"))
    with pytest.raises(ProviderRateLimited):
        embed(backend, {"input": "x"})
    from adapters.errors import ProviderRejected

    with pytest.raises(ProviderRejected) as bad:  # the fake's Titan takes 256, 512 or 1024
        embed(backend, {"input": "x", "dimensions": 100})
    assert "ValidationException" in bad.value.detail


def test_only_embedding_models_serve_embeddings() -> None:
    assert embedding_family(TITAN) == "titan"
    assert embedding_family("eu.cohere.embed-multilingual-v3") == "cohere"
    assert embedding_family("anthropic.claude-sonnet-4-5-v1:0") is None
    arn = "arn:aws:bedrock:eu-west-1:123456789012:provisioned-model/abc"
    assert embedding_family(arn) is None
    assert embedding_family(arn, "cohere") == "cohere"
    chat = build_bedrock_backend(BackendSpec("c", "bedrock", model="anthropic.claude-v2"))
    assert not serves_embeddings(chat)
    titan = build_bedrock_backend(BackendSpec("t", "bedrock", model=TITAN))
    assert serves_embeddings(titan)
    with pytest.raises(ValueError, match="titan' or 'cohere"):
        build_bedrock_backend(BackendSpec("t", "bedrock", model=arn, extra={"embeddings": "x"}))


def test_every_invoke_of_a_call_carries_its_traceparent(fake: FakeBedrock) -> None:
    """Titan takes one text per InvokeModel: both of a two-text call carry the call's
    `traceparent` (botocore's `before-call` hook, in each worker thread); a call without
    headers sends none."""
    backend = build(fake, TITAN)
    assert isinstance(backend, BedrockEmbeddingBackend)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    body = {"model": "titan", "input": ["a b c", "d e"]}
    asyncio.run(backend.embed(body, 10, {"traceparent": traceparent}))
    asyncio.run(backend.embed({"model": "titan", "input": "f"}, 10))
    assert [r["traceparent"] for r in fake.requests] == [traceparent, traceparent, None]
