"""Every body the OpenAI door writes is valid against OpenAI's published OpenAPI document
(`tests/openapi/`, 2.3.0): chat completions, stream chunks, forced tool calls, Responses
objects and events, models and errors, on an OpenAI-compatible and a translated Anthropic
upstream. Raw HTTP, so nothing between the gateway and the schema forgives a missing field."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import ACME_KEY
from tests.e2e.harness import RunningGateway
from tests.openapi.openai_schema import check

MODELS = ["gpt-4o-mini", "claude-sonnet-4-5"]  # an OpenAI-compatible and an Anthropic upstream
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}


def _post(gw: RunningGateway, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {ACME_KEY}"}
    return httpx.post(f"{gw.url}{path}", json=body, headers=headers, timeout=10)


def _data_lines(reply: httpx.Response) -> list[Any]:
    lines = [ln[6:] for ln in reply.text.split("\n") if ln.startswith("data: ")]
    assert lines and lines[-1] == "[DONE]" or "event: " in reply.text
    return [orjson.loads(ln) for ln in lines if ln != "[DONE]"]


@pytest.mark.parametrize("model", MODELS)
def test_chat_replies_and_chunks_are_valid(gateway: RunningGateway, model: str) -> None:
    text = {"model": model, "messages": [{"role": "user", "content": "hi words:3"}]}
    tool = {**text, "messages": [{"role": "user", "content": "call:get_weather"}]}
    tool |= {"tools": [WEATHER], "tool_choice": FORCED}
    for body in (text, tool):
        reply = _post(gateway, "/v1/chat/completions", body)
        assert reply.status_code == 200, reply.text
        check("CreateChatCompletionResponse", reply.json())
        assert reply.json()["choices"][0]["message"]["refusal"] is None
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        chunks = _data_lines(_post(gateway, "/v1/chat/completions", streamed))
        assert len(chunks) >= 3
        for chunk in chunks:
            check("CreateChatCompletionStreamResponse", chunk)


@pytest.mark.parametrize("model", MODELS)
def test_responses_objects_and_events_are_valid(gateway: RunningGateway, model: str) -> None:
    body = {"model": model, "input": "hi words:3", "store": False}
    tool = {**body, "input": "call:get_weather", "tool_choice": "required"}
    tool["tools"] = [{"type": "function", **WEATHER["function"]}]  # type: ignore[dict-item]
    for sent in (body, tool):
        reply = _post(gateway, "/v1/responses", sent)
        assert reply.status_code == 200, reply.text
        check("Response", reply.json())
        events = _data_lines(_post(gateway, "/v1/responses", {**sent, "stream": True}))
        assert events[-1]["type"] == "response.completed"
        for event in events:
            check("ResponseStreamEvent", event)


def test_models_and_errors_are_valid(gateway: RunningGateway) -> None:
    auth = {"authorization": f"Bearer {ACME_KEY}"}
    models = httpx.get(f"{gateway.url}/v1/models", headers=auth)
    check("ListModelsResponse", models.json())
    check("Model", httpx.get(f"{gateway.url}/v1/models/gpt-4o-mini", headers=auth).json())
    unknown = {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}
    over = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
    failures = [
        _post(gateway, "/v1/chat/completions", unknown),
        _post(gateway, "/v1/chat/completions", {**over, "max_tokens": 100_000}),
        _post(gateway, "/v1/chat/completions", {**over, "n": 2, "model": "claude-sonnet-4-5"}),
        _post(gateway, "/v1/responses", {"model": "gpt-4o-mini"}),
        httpx.post(f"{gateway.url}/v1/chat/completions", json=over),  # no key
        httpx.get(f"{gateway.url}/v1/models/no-such-model", headers=auth),
        _post(gateway, "/v1/completions", {"model": "gpt-4o-mini", "prompt": "x"}),
    ]
    assert [r.status_code for r in failures] == [404, 400, 400, 400, 401, 404, 400]
    for failure in failures:
        check("ErrorResponse", failure.json())
