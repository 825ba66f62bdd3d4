"""`Idempotency-Key` on the model doors, through the official SDKs and raw HTTP against a real
gateway (in-process replay store) in front of the wire-level fake: one upstream call per key,
replays byte for byte, a dropped stream retried whole, SDK retries past a client timeout."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.conftest import ACME_KEY, OTHER_KEY
from tests.e2e.harness import RunningGateway
from tests.fakes.reply_plan import VOCAB
from tests.fakes.upstream import FakeUpstream

ACME = {"authorization": f"Bearer {ACME_KEY}"}


def _calls(upstream: FakeUpstream, marker: str) -> int:
    return sum(1 for r in upstream.requests if marker.encode() in r.body)


def _ledger(gw: RunningGateway, marker_count: int) -> int:
    """Rows in the ledger once `marker_count` are there (or after 10 s): the rows of all calls."""
    engine = create_engine(gw.settings.database_url)
    deadline = time.monotonic() + 10
    try:
        while True:
            with engine.connect() as conn:
                num_rows = conn.execute(text("SELECT count(*) FROM usage")).scalar_one()
            if num_rows >= marker_count or time.monotonic() > deadline:
                return int(num_rows)
            time.sleep(0.1)
    finally:
        engine.dispose()


def _chat(marker: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": marker}], **extra}


def test_same_key_twice_is_one_upstream_call_and_one_ledger_row(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}  # an RFC 8941 string, as for tool runs
    body = _chat("m-twice words:7")
    first = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=ACME | key)
    again = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=ACME | key)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.content == first.content
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-length"] == str(len(first.content))
    assert _calls(upstream, "m-twice") == 1
    assert _ledger(gateway, 1) == 1
    # the same JSON written differently is the same request
    reordered = (
        b'{"messages": [{"content": "m-twice words:7", "role": "user"}], "model": "gpt-4o-mini"}'
    )
    third = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=reordered,
        headers=ACME | key | {"content-type": "application/json"},
    )
    assert third.content == first.content and _calls(upstream, "m-twice") == 1


def test_same_key_with_another_request_is_422_in_each_clients_shape(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    key = {"Idempotency-Key": "k-" + uuid.uuid4().hex}
    url = gateway.url + "/v1/chat/completions"
    assert httpx.post(url, json=_chat("m-422 words:2"), headers=ACME | key).status_code == 200
    changed = httpx.post(url, json=_chat("m-422 words:3"), headers=ACME | key)
    assert changed.status_code == 422
    assert changed.json()["error"]["code"] == "idempotency_key_reused"
    assert changed.json()["error"]["param"] == "Idempotency-Key"
    body = {"model": "claude-sonnet-4-5", "max_tokens": 20, "messages": [{"role": "user", "content": "m-422b"}]}  # fmt: skip
    messages = gateway.url + "/v1/messages"
    assert httpx.post(messages, json=body, headers=ACME | key).status_code == 422
    bad = httpx.post(messages, json=body, headers=ACME | {"Idempotency-Key": "has space"})
    assert bad.status_code == 400
    assert bad.json()["type"] == "error" and "Idempotency-Key" in bad.json()["error"]["message"]
    assert _calls(upstream, "m-422") == 1


def test_openai_sdk_retries_past_its_timeout_get_the_first_call_reply(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    """The fake stalls 1 s (under the backend's 2 s timeout), the SDK gives up after 0.4 s and
    retries with the same key: the retries join the running call instead of a second one."""
    upstream.app.delay_s = 1.0
    client = openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=ACME_KEY, timeout=0.4, max_retries=4
    )
    key = {"Idempotency-Key": "agent-step-" + uuid.uuid4().hex}
    reply = client.chat.completions.with_raw_response.create(
        extra_headers=key, **_chat("m-sdk words:5")
    )
    upstream.app.delay_s = 0.0
    assert reply.http_response.headers["idempotent-replayed"] == "true"
    assert reply.parse().choices[0].message.content == "The quick brown fox jumps"
    assert _calls(upstream, "m-sdk") == 1
    assert _ledger(gateway, 1) == 1


def _sse(gw: RunningGateway, body: dict[str, Any], headers: dict[str, str], num_lines: int | None = None) -> bytes:  # fmt: skip
    data = b""
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        for num, line in enumerate(r.iter_lines()):
            data += line.encode() + b"\n"
            if num_lines is not None and num + 1 >= num_lines:
                break  # the client goes away mid-stream
    return data


def _text(sse: bytes) -> str:
    chunks = [orjson.loads(line[6:]) for line in sse.splitlines() if line.startswith(b"data: {")]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_a_dropped_stream_retried_gets_the_whole_reply_from_one_call(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    upstream.app.chunk_delay_s = 0.05
    key = {"Idempotency-Key": "s-" + uuid.uuid4().hex}
    body = _chat("m-drop words:20", stream=True, stream_options={"include_usage": True})
    try:
        cut = _sse(gateway, body, ACME | key, num_lines=6)  # 3 chunks, each a line and a blank
        whole = _sse(gateway, body, ACME | key)
    finally:
        upstream.app.chunk_delay_s = 0.0
    assert whole.startswith(cut)
    assert whole.rstrip().endswith(b"data: [DONE]")
    assert _text(whole) == " ".join((VOCAB * 3)[:20])
    assert _calls(upstream, "m-drop") == 1
    assert _sse(gateway, body, ACME | key) == whole  # finished: replayed event by event
    assert _calls(upstream, "m-drop") == 1
    assert _ledger(gateway, 1) == 1


def test_messages_and_responses_replay_identically(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    key = {"Idempotency-Key": "d-" + uuid.uuid4().hex}
    ant = anthropic.Anthropic(base_url=gateway.url, api_key=ACME_KEY, max_retries=0)
    asked: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 30,
        "messages": [{"role": "user", "content": "m-msg words:4"}],
    }
    one = ant.messages.with_raw_response.create(extra_headers=key, **asked)
    two = ant.messages.with_raw_response.create(extra_headers=key, **asked)
    assert two.http_response.content == one.http_response.content
    assert two.http_response.headers["idempotent-replayed"] == "true"
    with ant.messages.stream(extra_headers={"Idempotency-Key": key["Idempotency-Key"] + "s"}, **asked) as s:  # fmt: skip
        streamed = s.get_final_text()
    with ant.messages.stream(extra_headers={"Idempotency-Key": key["Idempotency-Key"] + "s"}, **asked) as s:  # fmt: skip
        assert s.get_final_text() == streamed == "The quick brown fox"
    oai = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ACME_KEY, max_retries=0)
    # the door is part of the request: the key of a /v1/messages call is taken
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        oai.responses.create(extra_headers=key, model="gpt-4o-mini", input="m-resp words:3")
    assert refused.value.code == "idempotency_key_reused"
    key = {"Idempotency-Key": key["Idempotency-Key"] + "r"}
    first = oai.responses.with_raw_response.create(extra_headers=key, model="gpt-4o-mini", input="m-resp words:3")  # fmt: skip
    second = oai.responses.with_raw_response.create(extra_headers=key, model="gpt-4o-mini", input="m-resp words:3")  # fmt: skip
    assert second.http_response.content == first.http_response.content
    assert second.parse().output_text == "The quick brown"
    assert [_calls(upstream, m) for m in ("m-msg", "m-resp")] == [2, 1]  # json + stream, one


def test_another_tenant_with_the_same_key_runs_its_own_call(
    gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    key = {"Idempotency-Key": "shared-" + uuid.uuid4().hex}
    body = {"model": "claude-sonnet-4-5", "max_tokens": 30, "messages": [{"role": "user", "content": "m-tenants words:4"}]}  # fmt: skip
    url = gateway.url + "/v1/messages"
    mine = httpx.post(url, json=body, headers={"x-api-key": ACME_KEY} | key)
    theirs = httpx.post(url, json=body, headers={"x-api-key": OTHER_KEY} | key)
    assert (mine.status_code, theirs.status_code) == (200, 200)
    assert "idempotent-replayed" not in theirs.headers
    assert mine.json()["id"] != theirs.json()["id"]
    assert _calls(upstream, "m-tenants") == 2


def test_a_failed_call_frees_its_key(gateway: RunningGateway, upstream: FakeUpstream) -> None:
    key = {"Idempotency-Key": "f-" + uuid.uuid4().hex}
    upstream.fail_next(400)  # not retried by the gateway: answered as the upstream's 400
    url = gateway.url + "/v1/chat/completions"
    assert httpx.post(url, json=_chat("m-fail"), headers=ACME | key).status_code == 400
    ok = httpx.post(url, json=_chat("m-fail"), headers=ACME | key)
    assert ok.status_code == 200 and "idempotent-replayed" not in ok.headers
    assert _calls(upstream, "m-fail") == 2
