"""Nothing lost on the way back: an upstream of the client's own wire, answering with every
field the provider sends today (tests/fakes/today.py), reaches the client as it sent it,
streamed and not, byte for byte, the model name as the client asked its one edit; the usage
the ledger reads from it is the provider's, cache writes priced by lifetime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.e2e.test_front_doors import _ledger_rows
from tests.fakes import today
from tests.fakes.upstream import FakeUpstream

KEY = "lt-fidelity-key-0001"
ASKED = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}
DOOR = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[RunningGateway]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY)
    with FakeUpstream() as fake:
        fake.app.today = True
        openai = {"kind": "openai_compatible", "name": "oai", "base_url": fake.openai_base_url}
        claude = {"kind": "anthropic", "name": "claude", "base_url": fake.base_url}
        models = [
            {
                "name": ASKED["openai"],
                "backends": [{**openai, "model": today.UPSTREAM_MODEL["openai"]}],
            },
            {
                "name": ASKED["anthropic"],
                "backends": [
                    {**claude, "model": today.UPSTREAM_MODEL["anthropic"], "api_key_env": None}
                ],
            },
        ]
        prices = {ASKED["anthropic"]: {"input": 3.0, "output": 15.0}}
        running = start_gateway(
            write_config(tmp_path / "lantern.yaml", tmp_path, models, prices=prices)
        )
        try:
            yield running
        finally:
            running.stop()


def _post(gw: RunningGateway, wire: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    body = {"model": ASKED[wire], "messages": [{"role": "user", "content": "news?"}], **body}
    return httpx.post(f"{gw.url}{DOOR[wire]}", json=body, headers=headers, timeout=10)


def _as_asked(frames: list[bytes], wire: str) -> bytes:
    """The fake's frames with the one documented edit: the model name the client asked for."""
    out = []
    for frame in frames:
        head, _, data = frame.partition(b"data: ")
        if data.strip() == b"[DONE]":
            out.append(frame)
            continue
        event = orjson.loads(data)
        if wire == "openai":
            event["model"] = ASKED[wire]
        elif event["type"] == "message_start":
            event["message"] = {**event["message"], "model": ASKED[wire]}
        out.append(head + b"data: " + orjson.dumps(event) + b"\n\n")
    return b"".join(out)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_the_reply_is_the_upstreams_with_the_model_as_asked(
    gateway: RunningGateway, wire: str
) -> None:
    reply = _post(gateway, wire, {"max_tokens": 100})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {**today.reply_body(wire), "model": ASKED[wire]}
    streamed = {"max_tokens": 100, "stream": True}
    if wire == "openai":
        streamed["stream_options"] = {"include_usage": True}
    raw = _post(gateway, wire, streamed)
    assert raw.content == _as_asked(today.reply_frames(wire, streamed), wire)


def test_an_openai_stream_without_include_usage_loses_only_the_usage_chunk(
    gateway: RunningGateway,
) -> None:
    """The backend asks for usage (it settles quotas); a client that did not gets none."""
    raw = _post(gateway, "openai", {"stream": True})
    assert raw.content == _as_asked(today.reply_frames("openai", {"stream": True}), "openai")


def test_the_ledger_prices_the_anthropic_writes_by_lifetime(gateway: RunningGateway) -> None:
    _post(gateway, "anthropic", {"max_tokens": 100})
    _post(gateway, "anthropic", {"max_tokens": 100, "stream": True})
    rows = _ledger_rows(gateway, 2)
    usage = today.ANTHROPIC_USAGE
    # per million: input 3, reads 0.3, 5 min writes 3.75, 1 h writes 6, output 15; the one
    # web search at $0.01
    cost = (12 * 3 + 5120 * 0.3 + 110 * 3.75 + 200 * 6 + 41 * 15) / 1e6 + 0.01
    for row in rows:
        assert (row["input_tokens"], row["output_tokens"]) == (12, usage["output_tokens"])
        assert (row["cache_read_tokens"], row["cache_write_tokens"]) == (5120, 310)
        assert row["cost_usd"] == pytest.approx(cost)


# (wire, upstream status) -> (the client's status, its error type, OpenAI code and param)
ERRORS = {
    ("openai", 400): (400, "invalid_request_error", "context_length_exceeded", "messages"),
    ("openai", 429): (429, "requests", "rate_limit_exceeded", None),
    ("anthropic", 400): (400, "invalid_request_error", None, None),
    ("anthropic", 413): (400, "request_too_large", None, None),
    ("anthropic", 529): (502, "overloaded_error", None, None),
    # the gateway's own key refused: not the client's to fix, so Lantern's upstream error
    ("openai", 401): (400, "invalid_request_error", "upstream", None),
    ("anthropic", 401): (400, "invalid_request_error", None, None),
}


@pytest.mark.parametrize(("wire", "status"), list(ERRORS))
def test_an_upstream_error_keeps_the_providers_type_code_param_and_request_id(
    gateway: RunningGateway, wire: str, status: int
) -> None:
    reply = _post(gateway, wire, {"max_tokens": 100, "messages": [_asking(f"status:{status}")]})
    expected, type_, code, param = ERRORS[wire, status]
    assert reply.status_code == expected, reply.text
    said = today.OPENAI_ERRORS if wire == "openai" else today.ANTHROPIC_ERRORS
    if wire == "openai":
        error = reply.json()["error"]
        assert (error["type"], error["code"], error["param"]) == (type_, code, param)
        assert reply.headers["x-request-id"] == today.REQUEST_ID[wire]
    else:
        assert reply.json()["type"] == "error"
        error = reply.json()["error"]
        assert error["type"] == type_
        assert reply.headers["request-id"] == today.REQUEST_ID[wire]
    assert error["message"].endswith(said[status]["message"])
    for name, value in today.ACCOUNT_HEADERS[wire].items():  # the shared account's, not ours
        assert reply.headers.get(name) != value


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_an_error_inside_a_stream_keeps_the_providers_type(
    gateway: RunningGateway, wire: str
) -> None:
    body = {"max_tokens": 100, "stream": True, "messages": [_asking("error:midstream")]}
    raw = _post(gateway, wire, body)
    assert raw.status_code == 200
    sent = today.broken_frames(wire)
    assert raw.content.startswith(_as_asked(sent[:-1], wire))
    last = raw.content.removeprefix(_as_asked(sent[:-1], wire))
    head, _, data = last.partition(b"data: ")
    error = orjson.loads(data)["error"]
    if wire == "anthropic":
        assert head == b"event: error\n"
        assert error["type"] == "overloaded_error"
    else:
        assert (head, error["type"], error["code"]) == (b"", "server_error", "upstream")
    assert error["message"].endswith(
        orjson.loads(sent[-1].partition(b"data: ")[2])["error"]["message"]
    )


def _asking(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_reply_that_breaks_its_wire_is_the_upstreams_failure_not_the_clients(
    gateway: RunningGateway, wire: str
) -> None:
    """A 502 (in-band once the stream started) naming what broke, never a 400 that tells the
    client its own request was wrong."""
    broken = {"max_tokens": 100, "messages": [_asking("reply:malformed")]}
    reply = _post(gateway, wire, broken)
    assert reply.status_code == 502, reply.text
    field = "content" if wire == "anthropic" else "choices"
    assert reply.json()["error"]["type"] == "api_error"
    assert reply.json()["error"]["message"].startswith(
        f"upstream {'claude' if wire == 'anthropic' else 'oai'} failed: malformed reply: {field}: "
    )
    raw = _post(gateway, wire, {**broken, "stream": True})
    assert raw.status_code == 200
    sent = today.malformed_frames(wire)
    head, _, data = raw.content.removeprefix(_as_asked(sent[:1], wire)).partition(b"data: ")
    error = orjson.loads(data)["error"]
    assert error["type"] == "api_error"
    assert "malformed reply: stream: " in error["message"]


def test_the_official_sdks_read_the_providers_error(gateway: RunningGateway) -> None:
    """What an agent branches on: the OpenAI SDK's `code` and `param`, the Anthropic SDK's
    error type, and both SDKs' `request_id`."""
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=ASKED["openai"], messages=[_asking("status:400")])
    assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "messages")
    assert refused.value.request_id == today.REQUEST_ID["openai"]
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        claude.messages.create(
            model=ASKED["anthropic"], max_tokens=100, messages=[_asking("status:529")]
        )
    assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert overloaded.value.request_id == today.REQUEST_ID["anthropic"]
