"""The openai SDK's Responses client against a running gateway and the fake upstreams."""

from __future__ import annotations

import time

import openai
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.conftest import ACME_KEY
from tests.e2e.harness import RunningGateway
from tests.fakes.upstream import FakeUpstream

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": True,
}


def _oai(gw: RunningGateway, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def _ledger_rows(gw: RunningGateway, expected: int) -> list[dict[str, object]]:
    engine = create_engine(gw.settings.database_url)
    deadline = time.monotonic() + 10
    while True:
        with engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(text("SELECT * FROM usage ORDER BY ts"))]
        if len(rows) >= expected or time.monotonic() > deadline:
            engine.dispose()
            return rows
        time.sleep(0.1)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
def test_create_non_stream_text(gateway: RunningGateway, model: str) -> None:
    reply = _oai(gateway).responses.create(
        model=model, input="hello words:5", instructions="Be brief.", max_output_tokens=50
    )
    assert reply.object == "response" and reply.status == "completed"
    assert reply.id.startswith("resp_")
    assert reply.output_text == "The quick brown fox jumps"
    assert reply.usage is not None and reply.usage.output_tokens == 5
    rows = _ledger_rows(gateway, 1)
    assert len(rows) == 1
    row = rows[0]
    assert (row["tenant"], row["model"], row["status"], row["door"]) == (
        "acme",
        model,
        "ok",
        "responses",
    )
    assert row["output_tokens"] == reply.usage.output_tokens
    prompt = row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
    assert prompt == reply.usage.input_tokens
    assert reply.usage.input_tokens_details.cached_tokens == row["cache_read_tokens"]
    assert reply.usage.total_tokens == prompt + row["output_tokens"]


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
def test_stream_events_parse_and_match_the_final_response(
    gateway: RunningGateway, model: str
) -> None:
    with _oai(gateway).responses.stream(model=model, input="hi words:4") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * kinds.count("response.output_text.delta"),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds.count("response.output_text.delta") >= 1
    assert final.output_text == "The quick brown fox"
    assert final.usage is not None and final.usage.output_tokens == 4
    row = _ledger_rows(gateway, 1)[0]
    assert (row["door"], row["output_tokens"]) == ("responses", 4)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
def test_tool_call_then_previous_response_id(
    gateway: RunningGateway, upstream: FakeUpstream, model: str
) -> None:
    client = _oai(gateway)
    first = client.responses.create(
        model=model, input="call:get_weather for Paris", tools=[WEATHER]
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert calls[0].arguments == '{"text":"call:get_weather for Paris"}'
    second = client.responses.create(
        model=model,
        previous_response_id=first.id,
        tools=[WEATHER],
        input=[
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
            {"role": "user", "content": "thanks words:2"},
        ],
    )
    assert second.output_text == "The quick"
    assert second.previous_response_id == first.id
    # the upstream saw the whole conversation: the stored call and its output before the new text
    sent = upstream.requests[-1].body.decode()
    assert "call:get_weather for Paris" in sent and "sunny" in sent and "thanks" in sent
