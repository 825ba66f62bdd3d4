"""The openai SDK's Responses client against a running gateway and the fake upstreams."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.conftest import ACME_KEY, OTHER_KEY
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.responses_api import REASONING_TOKENS
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


def test_another_tenant_gets_404_for_a_response_id(gateway: RunningGateway) -> None:
    mine = _oai(gateway).responses.create(model="claude-sonnet-4-5", input="hello words:2")
    other = _oai(gateway, OTHER_KEY)
    for call in (
        lambda: other.responses.retrieve(mine.id),
        lambda: other.responses.delete(mine.id),
        lambda: other.responses.create(
            model="claude-sonnet-4-5", input="more words:2", previous_response_id=mine.id
        ),
    ):
        with pytest.raises(openai.NotFoundError) as err:
            call()
        assert err.value.body == {
            "message": f"Response with id '{mine.id}' not found.",
            "type": "invalid_request_error",
            "param": err.value.body["param"],  # type: ignore[index]
            "code": "response_not_found",
        }
    # still there for its own tenant, and gone once it deletes it
    assert _oai(gateway).responses.retrieve(mine.id).output_text == "The quick"
    _oai(gateway).responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        _oai(gateway).responses.retrieve(mine.id)
    # the refused continuation never reached an upstream: one ledger row, the first call's
    assert len(_ledger_rows(gateway, 1)) == 1


def test_store_false_leaves_nothing(gateway: RunningGateway) -> None:
    client = _oai(gateway)
    reply = client.responses.create(model="gpt-4o-mini", input="hello words:3", store=False)
    assert reply.output_text == "The quick brown" and reply.store is False
    with client.responses.stream(model="gpt-4o-mini", input="hi words:2", store=False) as stream:
        streamed = stream.get_final_response()
    store = gateway.components.response_store
    assert len(store) == 0
    for response_id in (reply.id, streamed.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response_id)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"truncation": "auto"}, "truncation"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"metadata": {"run": 5}}, "metadata.run"),  # echoed: OpenAI's values are strings
        ({"metadata": {"run": "r" * 513}}, "metadata.run"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
        ({"previous_response_id": "resp_" + "x" * 252}, "previous_response_id"),
        ({"safety_identifier": "s" * 257}, "safety_identifier"),
        ({"safety_identifier": "end\nuser"}, "safety_identifier"),
        ({"safety_identifier": "s" * 257, "user": "u"}, "safety_identifier"),
        ({"user": "u" * 257}, "user"),
        # `user` is held to the same rules beside a `safety_identifier` (the one the call keeps)
        ({"safety_identifier": "s", "user": "u" * 257}, "user"),
        ({"safety_identifier": "s", "user": "end\nuser"}, "user"),
        ({"safety_identifier": "s", "user": 7}, "user"),
        ({"user": 7}, "user"),
    ],
)
def test_unsupported_parameters_are_400_naming_the_field(
    gateway: RunningGateway, extra: dict[str, object], param: str
) -> None:
    body = {"model": "gpt-4o-mini", "input": "hello", **extra}
    reply = httpx.post(
        f"{gateway.url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {ACME_KEY}"},
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == param
    assert param in reply.json()["error"]["message"]
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert _ledger_rows(gateway, 0) == []


def test_a_response_id_past_256_characters_is_a_400_that_does_not_echo_it(
    gateway: RunningGateway,
) -> None:
    auth = {"authorization": f"Bearer {ACME_KEY}"}
    at_most, too_long = "resp_" + "x" * 251, "resp_" + "x" * 5000
    for path in ("", "/input_items"):
        for method in ("GET", "DELETE") if path == "" else ("GET",):
            url = f"{gateway.url}/v1/responses/{too_long}{path}"
            reply = httpx.request(method, url, headers=auth)
            assert reply.status_code == 400, (method, path)
            assert reply.json()["error"]["param"] == "response_id"
            assert too_long not in reply.text and len(reply.content) < 300
            url = f"{gateway.url}/v1/responses/{at_most}{path}"
            found = httpx.request(method, url, headers=auth)
            assert found.json()["error"]["code"] == "response_not_found", (method, path)
    body = {"model": "gpt-4o-mini", "input": "hi", "previous_response_id": too_long}
    reply = httpx.post(f"{gateway.url}/v1/responses", json=body, headers=auth)
    assert reply.json()["error"]["param"] == "previous_response_id"
    assert too_long not in reply.text and len(reply.content) < 300
    body["previous_response_id"] = at_most
    found = httpx.post(f"{gateway.url}/v1/responses", json=body, headers=auth)
    assert (found.status_code, found.json()["error"]["code"]) == (404, "response_not_found")


def test_a_stored_response_is_not_streamed_again(gateway: RunningGateway) -> None:
    """`GET /v1/responses/{id}`'s query as OpenAI's document declares it: `include` changes
    nothing; `stream=true` (which would stream a background response) and an unknown
    parameter are 400s naming them, never silently answered with the JSON object."""
    stored = _oai(gateway).responses.create(model="gpt-4o-mini", input="hello words:2")
    url = f"{gateway.url}/v1/responses/{stored.id}"
    auth = {"authorization": f"Bearer {ACME_KEY}"}
    plain = httpx.get(url, headers=auth)
    assert (plain.status_code, plain.json()["id"]) == (200, stored.id)
    for query in ({"stream": "false"}, {"include[]": "reasoning.encrypted_content"}):
        found = httpx.get(url, params=query, headers=auth)
        assert (found.status_code, found.content) == (200, plain.content), query
    for query, param in (({"stream": "true"}, "stream"), ({"expand": "output"}, "expand")):
        refused = httpx.get(url, params=query, headers=auth)
        assert refused.status_code == 400, query
        error = refused.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_tenant_limit_errors_name_the_responses_field(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        _oai(gateway).responses.create(
            model="gpt-4o-mini", input="hello", max_output_tokens=100_000
        )
    assert err.value.body["param"] == "max_output_tokens"  # type: ignore[index]
    assert err.value.body["code"] == "max_output_tokens"  # type: ignore[index]


def test_json_schema_text_format_reaches_a_chat_upstream(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    _oai(gateway).responses.create(
        model="gpt-4o-mini",
        input="hello words:2",
        text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}},
    )
    sent = upstream.requests[-1].json()
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "schema": schema, "strict": True},
    }


@pytest.fixture
def native_gateway(upstream: FakeUpstream, var_dir: Path) -> Iterator[RunningGateway]:
    """`gpt-native` is served by an upstream declared to speak the Responses API."""
    write_policy(var_dir / "policies", "acme", ACME_KEY, models=["gpt-native"])
    write_policy(var_dir / "policies", "other", OTHER_KEY, models=["gpt-native"])
    backend = {
        "kind": "openai_compatible",
        "name": "fake-responses",
        "base_url": upstream.openai_base_url,
        "model": "gpt-4o-mini",
        "responses": "native",
        "timeout_s": 10,
    }
    upstream.app.counter.encoding("gpt-4o-mini")  # its BPE tables, before the health probe
    config = write_config(
        var_dir / "lantern.yaml",
        var_dir,
        [{"name": "gpt-native", "backends": [backend]}],
        prices={"gpt-native": {"input": 1.0, "output": 2.0}},
    )
    running = start_gateway(config)
    try:
        yield running
    finally:
        running.stop()


def test_native_backend_gets_the_responses_body_and_its_reasoning_comes_back(
    native_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    client = _oai(native_gateway)
    first = client.responses.create(
        model="gpt-native", input="call:get_weather for Paris", tools=[WEATHER]
    )
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    assert first.model == "gpt-native"
    assert first.usage is not None
    assert first.usage.output_tokens_details.reasoning_tokens == REASONING_TOKENS
    sent = upstream.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.json()["store"] is False and sent.json()["model"] == "gpt-4o-mini"
    call = first.output[1]
    assert call.type == "function_call"
    second = client.responses.create(
        model="gpt-native",
        previous_response_id=first.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.previous_response_id == first.id
    # the conversation went upstream whole, the reasoning item (with its payload) included
    forwarded = upstream.requests[-1].json()
    assert "previous_response_id" not in forwarded
    assert [item["type"] for item in forwarded["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert forwarded["input"][1]["encrypted_content"] == f"opaque-{first.id}"
    rows = _ledger_rows(native_gateway, 2)
    assert [(r["door"], r["backend"], r["status"]) for r in rows] == [
        ("responses", "fake-responses", "ok")
    ] * 2
    assert rows[0]["output_tokens"] == first.usage.output_tokens


def test_native_stream_is_forwarded_and_stored(
    native_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    client = _oai(native_gateway)
    with client.responses.stream(model="gpt-native", input="hi words:3") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "The quick brown"
    assert upstream.requests[-1].json()["stream"] is True
    stored = client.responses.retrieve(final.id)
    assert stored.output_text == "The quick brown"
    with pytest.raises(openai.NotFoundError):
        _oai(native_gateway, OTHER_KEY).responses.retrieve(final.id)
    row = _ledger_rows(native_gateway, 1)[0]
    assert final.usage is not None
    assert (row["door"], row["output_tokens"]) == ("responses", final.usage.output_tokens)


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_failure_is_an_openai_error_with_a_ledger_row(
    gateway: RunningGateway, upstream: FakeUpstream, stream: bool
) -> None:
    client = _oai(gateway)
    upstream.fail_next(500)
    with pytest.raises(openai.APIStatusError) as err:
        if stream:
            with client.responses.stream(model="gpt-4o-mini", input="hi words:2") as events:
                list(events)
        else:
            client.responses.create(model="gpt-4o-mini", input="hi words:2")
    assert err.value.status_code == 502
    assert err.value.body["code"] == "upstream"  # type: ignore[index]
    # the failure leaves the door serving: the next call goes through
    assert client.responses.create(model="gpt-4o-mini", input="hi words:2").output_text == (
        "The quick"
    )
    rows = _ledger_rows(gateway, 2)
    assert [(r["door"], r["status"], r["output_tokens"]) for r in rows] == [
        ("responses", "error", 0),
        ("responses", "ok", 2),
    ]
