"""`/v1/embeddings` through a real gateway: served by an OpenAI-compatible upstream, LiteLLM or a
Bedrock embedding model, billed on the tokens it reports, one ledger row per call, under the tenant's
token quota; a model whose backends cannot embed is a 400 naming it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.e2e.test_front_doors import _ledger_rows
from tests.fakes.bedrock import FakeBedrock, embedding
from tests.fakes.embeddings import FakeEmbeddings, vector
from tests.openapi.openai_schema import check

KEY = "lt-embed-secret-key-0001"
TITAN = "amazon.titan-embed-text-v2:0"


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningGateway]:
    monkeypatch.setenv("LANTERN_TEST_EMBED_KEY", "sk-test")
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, limits={"tokens_per_minute": 10})
    with FakeEmbeddings() as fake:
        embed = {"kind": "openai_compatible", "name": "fake-embed", "base_url": fake.base_url}
        claude = {"kind": "anthropic", "name": "claude", "model": "claude-sonnet-4-5"}
        litellm = {"kind": "litellm", "name": "ll-embed", "model": "openai/te3"}
        litellm |= {"api_base": fake.base_url, "api_key_env": "LANTERN_TEST_EMBED_KEY"}
        models = [
            {"name": "text-embedding-3-small", "backends": [{**embed, "model": "te3"}]},
            {"name": "claude-sonnet-4-5", "backends": [{**claude, "base_url": fake.base_url}]},
            {"name": "via-litellm", "backends": [litellm]},
            {
                "name": "chat-via-litellm",
                "backends": [{**litellm, "name": "ll-chat", "model": "openai/gpt-4o-mini"}],
            },
        ]
        prices = {
            "text-embedding-3-small": {"input": 0.02, "output": 0.0},
            "via-litellm": {"input": 0.1, "output": 0.0},
        }
        config = write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
        running = start_gateway(config)
        try:
            yield running
        finally:
            running.stop()


def test_embeddings_are_served_billed_recorded_and_limited(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    reply = client.embeddings.create(model="text-embedding-3-small", input=["a b c", "d e"])
    assert [d.embedding for d in reply.data] == [vector("a b c"), vector("d e")]
    assert reply.usage.prompt_tokens == 5
    assert reply.model == "text-embedding-3-small"  # as asked; the upstream's is `te3`
    row = _ledger_rows(gateway, 1)[0]
    assert (row["model"], row["backend"], row["status"], row["door"]) == (
        "text-embedding-3-small",
        "fake-embed",
        "ok",
        "embeddings",
    )
    assert row["input_tokens"] == 5
    assert row["cost_usd"] == pytest.approx(5 * 0.02 / 1e6)
    through_litellm = client.embeddings.create(model="via-litellm", input="f g")
    assert through_litellm.data[0].embedding == vector("f g")
    assert through_litellm.model == "via-litellm"
    _check_raw(gateway, "text-embedding-3-small")
    row = _ledger_rows(gateway, 2)[1]
    assert (row["model"], row["backend"], row["input_tokens"]) == ("via-litellm", "ll-embed", 2)
    assert row["cost_usd"] == pytest.approx(2 * 0.1 / 1e6)
    with pytest.raises(openai.RateLimitError):  # 7 of 10 tokens used; 6 more do not fit
        client.embeddings.create(
            model="text-embedding-3-small", input="one two three four five six"
        )
    with pytest.raises(openai.BadRequestError) as no_embed:
        client.embeddings.create(model="claude-sonnet-4-5", input="x")
    assert no_embed.value.body["code"] == "embeddings_unsupported"  # type: ignore[index]
    assert no_embed.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as chat_only:  # LiteLLM's map: a chat model
        client.embeddings.create(model="chat-via-litellm", input="x")
    assert chat_only.value.body["code"] == "embeddings_unsupported"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model="text-embedding-3-small", input=[])
    assert bad.value.body["param"] == "input"  # type: ignore[index]


@pytest.fixture
def bedrock_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningGateway]:
    """Titan and a Claude chat model on the Bedrock wire fake; AWS credentials from the env."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDLANTERNTEST",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, limits={"tokens_per_minute": 10})
    fake = FakeBedrock(region="eu-west-1").start()
    aws = {"kind": "bedrock", "region": "eu-west-1", "endpoint_url": fake.url}
    models = [
        {"name": "titan", "backends": [{**aws, "name": "titan-v2", "model": TITAN}]},
        {"name": "claude", "backends": [{**aws, "name": "br-claude", "model": "anthropic.claude"}]},
    ]
    prices = {"titan": {"input": 0.02, "output": 0.0}, "claude": {"input": 3.0, "output": 15.0}}
    running = start_gateway(
        write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
    )
    try:
        yield running
    finally:
        running.stop()
        fake.stop()


def test_bedrock_titan_embeddings_are_served_billed_and_recorded(
    bedrock_gateway: RunningGateway,
) -> None:
    """The SDK asks for base64 vectors by default: they decode to Titan's floats. A list of
    inputs is one InvokeModel per text, the tokens summed."""
    client = openai.OpenAI(base_url=f"{bedrock_gateway.url}/v1", api_key=KEY, max_retries=0)
    reply = client.embeddings.create(model="titan", input=["a b c", "d e"], dimensions=256)
    assert [d.embedding for d in reply.data] == [embedding("a b c", 256), embedding("d e", 256)]
    assert (reply.usage.prompt_tokens, reply.model) == (5, "titan")
    (row,) = _ledger_rows(bedrock_gateway, 1)
    assert (row["model"], row["backend"], row["status"]) == ("titan", "titan-v2", "ok")
    assert row["door"] == "embeddings"
    assert row["input_tokens"] == 5
    assert row["cost_usd"] == pytest.approx(5 * 0.02 / 1e6)
    with pytest.raises(openai.RateLimitError):  # 5 of 10 tokens used; 6 more do not fit
        client.embeddings.create(model="titan", input="one two three four five six")
    with pytest.raises(openai.BadRequestError) as user:  # InvokeModel has no slot for it
        client.embeddings.create(model="titan", input="x", user="u-1")
    assert user.value.body["param"] == "user"  # type: ignore[index]
    client.embeddings.create(model="titan", input="x")  # refused before reserving: no row
    rows = _ledger_rows(bedrock_gateway, 2)
    assert [(r["status"], r["input_tokens"]) for r in rows] == [("ok", 5), ("ok", 1)]
    with pytest.raises(openai.BadRequestError) as chat_model:
        client.embeddings.create(model="claude", input="x")
    assert chat_model.value.body["code"] == "embeddings_unsupported"  # type: ignore[index]
    assert "'claude'" in chat_model.value.body["message"]  # type: ignore[index]
    _check_raw(bedrock_gateway, "titan")  # 4 of 10 tokens left: one each


def _check_raw(gw: RunningGateway, model: str) -> None:
    """The body as it leaves the gateway (float vectors) is valid against OpenAI's document."""
    for encoding in ("float", "base64"):
        reply = httpx.post(
            f"{gw.url}/v1/embeddings",
            json={"model": model, "input": "a", "encoding_format": encoding},
            headers={"authorization": f"Bearer {KEY}"},
        )
        assert reply.status_code == 200, reply.text
        if encoding == "float":  # the document types vectors as numbers; base64 is a string
            check("CreateEmbeddingResponse", reply.json())
        assert reply.json()["model"] == model


@pytest.fixture
def unlimited() -> Iterator[tuple[RunningGateway, FakeEmbeddings]]:
    """A tenant with no token quota, so that only the gateway's own limits can refuse."""
    with FakeEmbeddings() as fake, tempfile.TemporaryDirectory() as tmp:
        var = Path(tmp)
        (var / "policies").mkdir()
        write_policy(var / "policies", "acme", KEY)
        embed = {"kind": "openai_compatible", "name": "fake-embed", "base_url": fake.base_url}
        models = [{"name": "text-embedding-3-small", "backends": [{**embed, "model": "te3"}]}]
        running = start_gateway(write_config(var / "lantern.yaml", var, models))
        try:
            yield running, fake
        finally:
            running.stop()


def test_an_input_array_holds_at_most_2048_items(
    unlimited: tuple[RunningGateway, FakeEmbeddings],
) -> None:
    """OpenAI's limit on any `input` array: one request of a million one-word texts would be a
    million InvokeModel calls on Bedrock Titan (one per text)."""
    gateway, fake = unlimited
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    served = client.embeddings.create(model="text-embedding-3-small", input=["a"] * 2048)
    assert (len(served.data), served.usage.prompt_tokens) == (2048, 2048)
    for over in (["a"] * 2049, [[1]] * 2049, [1] * 2049):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="text-embedding-3-small", input=over)  # type: ignore[arg-type]
        assert refused.value.body == {
            "message": "input: 2049 items; an array holds at most 2048",
            "type": "invalid_request_error",
            "param": "input",
            "code": "max_inputs",
        }
    sent = [r for r in fake.app.requests if r.path == "/v1/embeddings"]
    assert len(sent) == 1  # the refused calls reached no upstream
    assert len(_ledger_rows(gateway, 1)) == 1


def test_dimensions_is_a_positive_integer(unlimited: tuple[RunningGateway, FakeEmbeddings]) -> None:
    """Refused here, naming the field, before anything is reserved or forwarded (an upstream's
    own refusal names no field, and its call is a ledger row)."""
    gateway, fake = unlimited
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    for dimensions in (0, -3, 1.5, "256", True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(
                model="text-embedding-3-small",
                input="a b",
                dimensions=dimensions,  # type: ignore[arg-type]
            )
        assert refused.value.body == {
            "message": "dimensions: expected a positive integer",
            "type": "invalid_request_error",
            "param": "dimensions",
            "code": "invalid_request",
        }, dimensions
    served = client.embeddings.create(model="text-embedding-3-small", input="a b", dimensions=3)
    assert served.usage.prompt_tokens == 2
    sent = [r.json() for r in fake.app.requests if r.path == "/v1/embeddings"]
    assert [body["dimensions"] for body in sent] == [3]
    assert len(_ledger_rows(gateway, 1)) == 1
