"""The API surface around the chat doors, through a real gateway: count_tokens where the
provider cannot count, /v1/models/{id}, /v1/completions, unknown routes in each door's error
shape, fields a backend cannot honour refused by name, and the max_tokens clamp."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from adapters.wire import anthropic as anthropic_wire
from cachekeys.blockhash import tenant_salt
from cachekeys.isolation import isolate, scope_line
from cachekeys.normalise import PublicPrefix
from tests.e2e.conftest import ACME_KEY
from tests.e2e.harness import RunningGateway
from tests.fakes.upstream import FakeUpstream

AUTH = {"authorization": f"Bearer {ACME_KEY}"}


def test_count_tokens_estimates_when_the_provider_cannot(gateway: RunningGateway) -> None:
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hello there"}]}
    reply = httpx.post(f"{gateway.url}/v1/messages/count_tokens", json=body, headers=AUTH)
    assert reply.status_code == 200
    assert reply.headers["x-lantern-token-count"] == "estimate"
    # the count of the prompt as the gateway sends it: the tenant's scope line included
    line = scope_line(tenant_salt(b"test-secret", "acme"))
    scoped = isolate("anthropic", body, line, PublicPrefix())
    counter = gateway.components.pipeline.s.counter
    scoped_request = anthropic_wire.decode_request(scoped, require_max_tokens=False)
    expected = counter.count_prompt(scoped_request, "acme")
    assert reply.json() == {"input_tokens": expected}
    unknown = httpx.post(
        f"{gateway.url}/v1/messages/count_tokens", json={**body, "model": "nope"}, headers=AUTH
    )
    assert unknown.status_code == 404 and unknown.json()["type"] == "error"


def test_models_by_id_and_the_unserved_and_unknown_routes(gateway: RunningGateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ACME_KEY, max_retries=0)
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=ACME_KEY, max_retries=0)
    assert claude.models.retrieve("claude-sonnet-4-5").type == "model"
    with pytest.raises(openai.BadRequestError) as legacy:
        client.completions.create(model="gpt-4o-mini", prompt="hi")
    assert legacy.value.body["code"] == "unsupported_endpoint"  # type: ignore[index]
    assert legacy.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    message = legacy.value.body["message"]  # type: ignore[index]
    assert "/v1/completions" in message and "/v1/chat/completions" in message
    msgs = httpx.post(f"{gateway.url}/v1/messages/batches", json={}, headers=AUTH)
    assert msgs.status_code == 404
    assert msgs.json()["type"] == "error"
    assert msgs.json()["error"]["type"] == "not_found_error"
    other = httpx.get(f"{gateway.url}/v1/nothing-here", headers=AUTH)
    assert other.status_code == 404
    assert other.json()["error"]["code"] == "unknown_route"


def test_untranslatable_fields_are_refused_by_name(gateway: RunningGateway) -> None:
    """An OpenAI client on an Anthropic backend: `response_format`, `n` (streamed or not),
    `logprobs`, `reasoning_effort` and `metadata` have no Anthropic equivalent; neutral values
    pass, and `parallel_tool_calls: false` is Anthropic's `disable_parallel_tool_use`."""
    base = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x"}]}
    for field, value, stream in (
        ("response_format", {"type": "json_object"}, False),
        ("n", 2, False),
        ("n", 2, True),
        ("logprobs", True, False),
        ("reasoning_effort", "high", True),
        ("metadata", {"k": "v"}, False),
    ):
        body = {**base, field: value, "stream": stream}
        reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=AUTH)
        assert reply.status_code == 400, field
        assert reply.json()["error"]["param"] == field
        assert reply.json()["error"]["code"] == "unsupported_parameter"
    neutral = {**base, "n": 1, "parallel_tool_calls": True, "max_tokens": 20}
    ok = httpx.post(f"{gateway.url}/v1/chat/completions", json=neutral, headers=AUTH)
    assert ok.status_code == 200
    assert ok.json()["model"] == "claude-sonnet-4-5"


def test_parallel_tool_calls_false_reaches_anthropic(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [tool],
        "parallel_tool_calls": False,
    }
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=AUTH)
    assert reply.status_code == 200
    sent = upstream.requests[-1].json()
    assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_a_json_schema_response_format_reaches_anthropic(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    }
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=AUTH)
    assert reply.status_code == 200
    sent = upstream.requests[-1].json()
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "response_format" not in sent
