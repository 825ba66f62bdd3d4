"""The official SDKs (openai, anthropic, litellm) against a running gateway and fake upstreams."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import create_engine, text

from cachekeys.blockhash import tenant_salt
from cachekeys.isolation import scope_line
from tests.e2e.conftest import ACME_KEY, OTHER_KEY
from tests.e2e.harness import ADMIN_TOKEN, RunningGateway

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _oai(gw: RunningGateway, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def _ant(gw: RunningGateway, key: str = ACME_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key, max_retries=0)


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


def test_openai_sdk_chat_non_stream(gateway: RunningGateway) -> None:
    reply = _oai(gateway).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello words:5"}], max_tokens=50
    )
    assert reply.choices[0].message.content == "The quick brown fox jumps"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 5
    rows = _ledger_rows(gateway, 1)
    assert len(rows) == 1
    row = rows[0]
    assert (row["tenant"], row["key_id"], row["model"], row["backend"], row["status"]) == (
        "acme",
        "k1",
        "gpt-4o-mini",
        "fake-openai",
        "ok",
    )
    assert row["output_tokens"] == 5
    assert row["input_tokens"] + row["cache_read_tokens"] == reply.usage.prompt_tokens
    assert float(row["cost_usd"]) > 0


def test_openai_sdk_stream_with_usage(gateway: RunningGateway) -> None:
    stream = _oai(gateway).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi words:4"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text_out = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text_out == "The quick brown fox"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4


def test_openai_sdk_tool_call_round_trip(gateway: RunningGateway) -> None:
    client = _oai(gateway)
    first = client.chat.completions.create(
        model="gpt-4o-mini",
        tools=TOOLS,
        messages=[{"role": "user", "content": "call:get_weather for Paris"}],
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    second = client.chat.completions.create(
        model="gpt-4o-mini",
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "call:get_weather for Paris"},
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            {"role": "user", "content": "thanks words:2"},
        ],
    )
    assert second.choices[0].message.content == "The quick"


def test_anthropic_sdk_messages_and_stream(gateway: RunningGateway) -> None:
    client = _ant(gateway)
    reply = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief."}],
        messages=[{"role": "user", "content": "hello words:3"}],
    )
    assert reply.content[0].text == "The quick brown"
    assert reply.usage.output_tokens == 3
    with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "hello words:6"}],
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == "The quick brown fox jumps over"
    assert final.usage.output_tokens == 6


def test_anthropic_sdk_tool_use(gateway: RunningGateway) -> None:
    reply = _ant(gateway).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        tools=[
            {
                "name": "get_weather",
                "description": "Weather",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
        messages=[{"role": "user", "content": "call:get_weather Paris"}],
    )
    assert reply.stop_reason == "tool_use"
    assert reply.content[0].type == "tool_use" and reply.content[0].name == "get_weather"


def test_cross_format_openai_client_to_anthropic_backend(gateway: RunningGateway, upstream) -> None:  # type: ignore[no-untyped-def]
    reply = _oai(gateway).chat.completions.create(
        model="claude-sonnet-4-5",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello words:2"},
        ],
        max_tokens=20,
    )
    assert reply.choices[0].message.content == "The quick"
    sent = upstream.requests[-1]
    assert sent.path == "/v1/messages"
    # the tenant's cache-scope line first (the provider's cache is shared by its API key)
    scope = scope_line(tenant_salt(gateway.settings.resolve_server_secret(), "acme"))
    assert sent.json()["system"] == [
        {"type": "text", "text": scope},
        {"type": "text", "text": "Be brief."},
    ]


def test_litellm_sdk_as_client(gateway: RunningGateway) -> None:
    import litellm

    reply = litellm.completion(
        model="openai/gpt-4o-mini",
        api_base=f"{gateway.url}/v1",
        api_key=ACME_KEY,
        messages=[{"role": "user", "content": "hey words:3"}],
        max_tokens=10,
    )
    assert reply.choices[0].message.content == "The quick brown"


def test_litellm_backend_reaches_anthropic_fake(gateway: RunningGateway) -> None:
    reply = _oai(gateway).chat.completions.create(
        model="claude-via-litellm",
        messages=[{"role": "user", "content": "yo words:2"}],
        max_tokens=20,
    )
    assert reply.choices[0].message.content == "The quick"


def test_auth_errors_in_each_format(gateway: RunningGateway) -> None:
    with pytest.raises(openai.AuthenticationError) as exc:
        _oai(gateway, "wrong").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
        )
    assert exc.value.status_code == 401
    with pytest.raises(anthropic.AuthenticationError) as aexc:
        _ant(gateway, "wrong").messages.create(
            model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert aexc.value.body["error"]["type"] == "authentication_error"


def test_model_not_allowed_is_403_and_unknown_is_404(gateway: RunningGateway) -> None:
    with pytest.raises(openai.PermissionDeniedError) as exc:
        _oai(gateway, OTHER_KEY).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
        )
    assert exc.value.body["code"] == "models"
    with pytest.raises(openai.NotFoundError) as nf:
        _oai(gateway).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    assert nf.value.body["code"] == "model_not_found"


def test_limits_at_the_door_name_the_rule(gateway: RunningGateway) -> None:
    with pytest.raises(openai.BadRequestError) as big:
        _oai(gateway).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "word " * 3000}]
        )
    assert big.value.body["code"] == "max_prompt_tokens"
    assert big.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as out:
        _oai(gateway).chat.completions.create(
            model="gpt-4o-mini", max_tokens=999, messages=[{"role": "user", "content": "x"}]
        )
    assert out.value.body["code"] == "max_output_tokens"
    assert out.value.body["param"] == "max_tokens"
    bad = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=b"{not json",
        headers={"authorization": f"Bearer {ACME_KEY}"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "body"


def test_upstream_5xx_and_timeout(gateway: RunningGateway, upstream) -> None:  # type: ignore[no-untyped-def]
    upstream.fail_next(status=503, count=1)
    with pytest.raises(openai.APIStatusError) as exc:
        _oai(gateway).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
        )
    assert exc.value.status_code == 502
    upstream.app.delay_s = 3.0
    try:
        with pytest.raises(openai.APIStatusError) as slow:
            _oai(gateway).chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
            )
        assert slow.value.status_code == 504
    finally:
        upstream.app.delay_s = 0.0
    rows = _ledger_rows(gateway, 2)
    assert [r["status"] for r in rows] == ["error", "error"]
    assert {r["error_kind"] for r in rows} == {"ProviderUnavailable", "ProviderTimeout"}
    # two failures in a row drain the only replica; with nothing else to go to it still takes
    # the next call (panic routing), and its good answer brings it back
    served = _oai(gateway).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
    )
    assert served.choices[0].finish_reason == "stop"


def test_models_list_is_per_tenant_and_ops_routes(gateway: RunningGateway) -> None:
    listed = _oai(gateway, OTHER_KEY).models.list()
    assert [m.id for m in listed.data] == ["claude-sonnet-4-5"]
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    _oai(gateway).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "words:1"}]
    )
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert (
        'lantern_requests_total{backend="fake-openai",model="gpt-4o-mini",status="ok",tenant="acme"} 1.0'
        in metrics
    )
    denied = httpx.get(f"{gateway.url}/admin/policy")
    assert denied.status_code == 401
    policy = httpx.get(
        f"{gateway.url}/admin/policy", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}
    ).json()
    assert sorted(t["tenant"] for t in policy["tenants"]) == ["acme", "other"]
    assert policy["errors"] == []


def test_admin_cost_report_matches_the_ledger(gateway: RunningGateway) -> None:
    client = _oai(gateway)
    for words in (3, 5):
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": f"hi words:{words}"}]
        )
    rows = _ledger_rows(gateway, 2)
    auth = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    report = httpx.get(
        f"{gateway.url}/admin/reports/cost", params={"group_by": ["tenant", "model"]}, headers=auth
    ).json()
    assert report["group_by"] == ["tenant", "model"]
    [row] = report["rows"]
    assert (row["tenant"], row["model"]) == ("acme", "gpt-4o-mini")
    assert row["output_tokens"] == 8
    assert row["cost_usd"] == pytest.approx(sum(float(r["cost_usd"]) for r in rows), abs=1e-8)
    bad = httpx.get(f"{gateway.url}/admin/reports/cost", params={"group_by": "color"}, headers=auth)
    assert bad.status_code == 400 and "color" in bad.json()["error"]["message"]


def test_one_span_per_call_with_counts_and_no_text(gateway: RunningGateway) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    telemetry = gateway.components.pipeline.s.telemetry
    telemetry.add_span_processor(SimpleSpanProcessor(exporter))
    secret_text = "the-password-is-swordfish words:4"
    reply = _oai(gateway).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": secret_text}]
    )
    deadline = time.monotonic() + 10  # the span is written just after the reply is sent
    while not exporter.get_finished_spans() and time.monotonic() < deadline:
        time.sleep(0.01)
    while len(exporter.get_finished_spans()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    [attempt, span] = exporter.get_finished_spans()  # the upstream attempt ends first
    assert attempt.parent is not None and attempt.parent.span_id == span.context.span_id
    attrs = dict(span.attributes)
    assert span.name == "chat gpt-4o-mini"
    assert attrs["lantern.tenant"] == "acme"
    assert attrs["lantern.backend"] == "fake-openai"
    assert attrs["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["lantern.status"] == "ok"
    assert not any("swordfish" in str(v) for v in attrs.values())
