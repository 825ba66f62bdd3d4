"""`/v1/embeddings` through a real gateway: served by an OpenAI-compatible upstream, billed on
the tokens it reports, one ledger row per call, under the tenant's token quota; a model whose
backends cannot embed is a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.e2e.test_front_doors import _ledger_rows
from tests.fakes.embeddings import FakeEmbeddings, vector

KEY = "lt-embed-secret-key-0001"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, limits={"tokens_per_minute": 10})
    with FakeEmbeddings() as fake:
        embed = {"kind": "openai_compatible", "name": "fake-embed", "base_url": fake.base_url}
        claude = {"kind": "anthropic", "name": "claude", "model": "claude-sonnet-4-5"}
        models = [
            {"name": "text-embedding-3-small", "backends": [{**embed, "model": "te3"}]},
            {"name": "claude-sonnet-4-5", "backends": [{**claude, "base_url": fake.base_url}]},
        ]
        prices = {"text-embedding-3-small": {"input": 0.02, "output": 0.0}}
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
    (row,) = _ledger_rows(gateway, 1)
    assert (row["model"], row["backend"], row["status"]) == (
        "text-embedding-3-small",
        "fake-embed",
        "ok",
    )
    assert row["input_tokens"] == 5
    assert row["cost_usd"] == pytest.approx(5 * 0.02 / 1e6)
    with pytest.raises(openai.RateLimitError):  # 5 of 10 tokens used; 6 more do not fit
        client.embeddings.create(
            model="text-embedding-3-small", input="one two three four five six"
        )
    with pytest.raises(openai.BadRequestError) as no_embed:
        client.embeddings.create(model="claude-sonnet-4-5", input="x")
    assert no_embed.value.body["code"] == "embeddings_unsupported"  # type: ignore[index]
    assert no_embed.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model="text-embedding-3-small", input=[])
    assert bad.value.body["param"] == "input"  # type: ignore[index]
