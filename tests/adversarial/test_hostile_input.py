"""Hostile and malformed requests against a real `lantern serve` process: bounded bodies
(413 before the body is read past the limit), authentication before the body is read, big
bodies worked off the event loop (`/healthz` and another tenant answer meanwhile, resident
memory bounded), and a 4xx in the client's own format, naming the field, for each malformed
case that used to be a 500 or was forwarded upstream."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from adapters.tokens import TokenCounter
from adapters.wire import anthropic as anthropic_wire
from cachekeys.isolation import isolate
from cachekeys.normalise import PublicPrefix
from tests.adversarial.edge_proc import (
    ACME_KEY,
    MAX_PROMPT_TOKENS,
    METRICS_TOKEN,
    OTHER_KEY,
    EdgeGateway,
    edge_gateway,
    read_reply,
    request_head,
)

MIB = 1024 * 1024
DEFAULT_MAX_BODY = 32 * MIB
BIG = 50 * MIB
# Resident memory a hostile body may add to the gateway, after its reply: the 413s buffer
# nothing; a body worked in full (under a raised limit) is parsed once in a worker thread.
RSS_BOUND_413_KIB = 64 * 1024
RSS_BOUND_PARSED_KIB = 1024 * 1024
DOORS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
SMALL = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeGateway]:
    """Default limits (32 MiB bodies), /metrics behind a token."""
    with edge_gateway(tmp_path_factory.mktemp("edge"), metrics_token=METRICS_TOKEN) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeGateway]:
    """A body limit raised to 128 MiB, so that huge bodies are parsed; /metrics open."""
    with edge_gateway(tmp_path_factory.mktemp("roomy"), max_body_bytes=128 * MIB) as gateway:
        yield gateway


def auth(key: str = ACME_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "content-type": "application/json"}


def assert_error(wire: str, reply: Any, kind: str, code: str, field: str | None) -> None:
    """The client's own error shape, naming the rule and the field."""
    if wire == "openai":
        assert set(reply) == {"error"}
        assert (reply["error"]["type"], reply["error"]["code"]) == (kind, code)
        assert reply["error"]["param"] == field
    else:
        assert reply["type"] == "error" and reply["error"]["type"] == kind
        assert field is None or reply["error"]["message"].count(field) >= 1


def others_answer(gw: EdgeGateway) -> None:
    """/healthz and another tenant's call, answered in full."""
    assert httpx.get(gw.url + "/healthz", timeout=30).json() == {"status": "ok"}
    reply = httpx.post(gw.url + DOORS["openai"], json=SMALL, headers=auth(OTHER_KEY), timeout=30)
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == (
        "The quick brown fox jumps over the lazy dog"
    )


def is_answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def assert_worked_off_the_loop(gw: EdgeGateway, before: dict[int, float]) -> None:
    """Most of the CPU the gateway used since `before` was a worker thread's, not the event
    loop's (whose thread id is the process id): a count, not a race against the clock. The
    loop reads the body (about a sixth of the work for these bodies) and answers the others."""
    used = {tid: cpu - before.get(tid, 0.0) for tid, cpu in gw.cpu_s_by_thread().items()}
    loop, total = used.get(gw.proc.pid, 0.0), sum(used.values())
    assert loop < total / 2, f"event loop {loop:.2f} s of {total:.2f} s CPU"


@pytest.mark.parametrize(
    ("wire", "kind"), [("openai", "invalid_request_error"), ("anthropic", "request_too_large")]
)
def test_declared_oversize_body_gets_413_before_it_is_sent(
    gw: EdgeGateway, wire: str, kind: str
) -> None:
    rss_before = gw.rss_kib()
    with gw.connect() as sock:
        sock.sendall(request_head(DOORS[wire], {**auth(), "content-length": str(BIG)}))
        reply = read_reply(sock)  # not one byte of the 50 MiB was sent
        assert reply.status == 413
        assert_error(wire, reply.json(), kind, "max_body_bytes", "body")
        others_answer(gw)
    assert gw.rss_kib() - rss_before < RSS_BOUND_413_KIB


def test_no_key_is_refused_before_the_body_is_read(gw: EdgeGateway) -> None:
    with gw.connect() as sock:
        head = {"content-type": "application/json", "content-length": str(BIG)}
        sock.sendall(request_head(DOORS["openai"], head))
        reply = read_reply(sock)
    assert reply.status == 401
    assert_error("openai", reply.json(), "invalid_request_error", "api_key", None)
    for wire, kind in (("openai", "invalid_request_error"), ("anthropic", "authentication_error")):
        nope = httpx.post(gw.url + DOORS[wire], content=b"{nope", timeout=30)
        assert nope.status_code == 401
        assert_error(wire, nope.json(), kind, "api_key", None)


def test_chunked_body_is_counted_and_cut_at_the_limit(gw: EdgeGateway) -> None:
    rss_before = gw.rss_kib()
    chunk = b"x" * MIB
    sent = 0
    with gw.connect() as sock:
        head = {**auth(), "transfer-encoding": "chunked"}
        sock.sendall(request_head(DOORS["anthropic"], head))
        while sent < BIG and not is_answered(sock):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        reply = read_reply(sock)
    assert reply.status == 413
    assert_error("anthropic", reply.json(), "request_too_large", "max_body_bytes", None)
    assert DEFAULT_MAX_BODY < sent < BIG  # answered once the count passed the limit
    assert gw.rss_kib() - rss_before < RSS_BOUND_PARSED_KIB


def test_1_5m_messages_get_400_while_others_are_served(roomy: EdgeGateway) -> None:
    """62 MiB, under the raised limit: parsed in a worker thread, refused by max_messages."""
    message = {"role": "user", "content": "spam spam spam"}
    body = orjson.dumps({"model": "gpt-4o-mini", "messages": [message] * 1_500_000})
    rss_before = roomy.rss_kib()
    upstream_before = len(roomy.upstream.requests)
    cpu_before = roomy.cpu_s_by_thread()
    with roomy.connect() as sock:
        sock.sendall(request_head(DOORS["openai"], {**auth(), "content-length": str(len(body))}))
        sock.sendall(body)
        others_answer(roomy)
        reply = read_reply(sock)
    assert_worked_off_the_loop(roomy, cpu_before)
    assert reply.status == 400
    assert_error("openai", reply.json(), "invalid_request_error", "max_messages", "messages")
    assert reply.json()["error"]["message"] == "messages: 1500000; the gateway's limit is 100000"
    assert roomy.rss_kib() - rss_before < RSS_BOUND_PARSED_KIB
    assert len(roomy.upstream.requests) == upstream_before + 1  # the other tenant's call only


def test_large_prompt_is_counted_off_the_loop(gw: EdgeGateway) -> None:
    """A 24 MiB prompt (under the limit): decoded, prepared and counted in a worker thread,
    its provider-cache scope line included; the tenant's max_prompt_tokens refuses it, and
    nothing reaches the upstream."""
    text = "lorem ipsum dolor sit amet " * (24 * MIB // 27)
    doc = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }
    body = orjson.dumps(doc)
    scoped = anthropic_wire.decode_request(
        isolate("anthropic", doc, gw.scope_line("acme"), PublicPrefix())
    )
    tokens = TokenCounter().count_request(scoped)
    upstream_before = len(gw.upstream.requests)
    cpu_before = gw.cpu_s_by_thread()
    with gw.connect() as sock:
        sock.sendall(request_head(DOORS["anthropic"], {**auth(), "content-length": str(len(body))}))
        sock.sendall(body)
        others_answer(gw)
        reply = read_reply(sock)
    assert_worked_off_the_loop(gw, cpu_before)
    assert reply.status == 400
    assert reply.json()["error"] == {
        "type": "invalid_request_error",
        "message": f"prompt has {tokens} tokens; tenant limit max_prompt_tokens is "
        f"{MAX_PROMPT_TOKENS}",
    }
    assert len(gw.upstream.requests) == upstream_before + 1  # the other tenant's call only


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def tools_nested(levels: int) -> bytes:
    schema = b'{"a":' * levels + b"{}" + b"}" * levels
    return (
        b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"tools":[{"type":'
        b'"function","function":{"name":"f","parameters":{"type":"object","properties":'
        + schema
        + b"}}}]}"
    )


OPENAI_HI = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]'
ANTHROPIC_HI = (
    b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]'
)
MALFORMED = [  # (door, body, rule, field)
    ("openai", OPENAI_HI + b',"x":' + deep(300) + b"}", "max_json_depth", "x[0][0][0][0][0]"),
    (
        "anthropic",
        ANTHROPIC_HI + b',"metadata":' + deep(300) + b"}",
        "max_json_depth",
        "metadata[0][0][0][0][0]",
    ),
    (
        "openai",
        tools_nested(900),
        "max_json_depth",
        "tools[0].function.parameters.properties.a",
    ),
    (
        "openai",
        OPENAI_HI + b',"stream":true,"stream_options":"x"}',
        "invalid_request",
        "stream_options",
    ),
    (
        "openai",
        OPENAI_HI + b',"stream_options":{"include_usage":"yes"}}',
        "invalid_request",
        "stream_options.include_usage",
    ),
    (
        "openai",
        b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":{}}]}]}',
        "invalid_request",
        "messages[0].content[0].type",
    ),
    (
        "anthropic",
        b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":'
        b'[{"type":{}}]}]}',
        "invalid_request",
        "messages[0].content[0].type",
    ),
    ("openai", b'{"model":"gpt-4o-mini","messages":[]}', "invalid_request", "messages"),
    (
        "anthropic",
        b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[]}',
        "invalid_request",
        "messages",
    ),
    (
        "openai",
        b'{"model":"gpt-4o-mini","messages":[{"role":"user"}]}',
        "invalid_request",
        "messages[0].content",
    ),
    (
        "anthropic",
        b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user"}]}',
        "invalid_request",
        "messages[0].content",
    ),
    ("openai", b'{"model":"gpt-4o-mini","messages":[1e999]}', "invalid_request", "body"),
]


@pytest.mark.parametrize(("wire", "body", "rule", "field"), MALFORMED)
def test_malformed_request_gets_400_naming_the_field(
    gw: EdgeGateway, wire: str, body: bytes, rule: str, field: str
) -> None:
    upstream_before = len(gw.upstream.requests)
    reply = httpx.post(gw.url + DOORS[wire], content=body, headers=auth(), timeout=30)
    assert reply.status_code == 400
    assert_error(wire, reply.json(), "invalid_request_error", rule, field)
    assert len(gw.upstream.requests) == upstream_before  # nothing forwarded, nothing billed


def run_tool(gw: EdgeGateway, body: bytes, key: str) -> httpx.Response:
    headers = {**auth(), "idempotency-key": key}
    return httpx.post(gw.url + "/v1/tools/runs", content=body, headers=headers, timeout=60)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"tool":"echo","limits":{"wall_s":NaN}}', "body"),
        (b'{"tool":"echo","limits":{"wall_s":Infinity}}', "body"),
        (b'{"tool":"echo","limits":{"wall_s":0}}', "limits.wall_s"),
        (b'{"tool":"echo","limits":{"memory_mb":-1}}', "limits.memory_mb"),
        (b'{"tool":"echo","limits":{"wall_s":21}}', "limits.wall_s"),  # the policy says 20
        (b'{"tool":"echo","limits":{"wall_s":1e999}}', "body"),
    ],
)
def test_tool_run_limits_are_validated_and_leave_the_key_unused(
    gw: EdgeGateway, body: bytes, param: str
) -> None:
    key = f"edge-{abs(hash(body))}"
    refused = run_tool(gw, body, key)
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"
    assert refused.json()["error"]["param"] == param
    ran = run_tool(gw, b'{"tool":"echo","limits":{"wall_s":5}}', key)
    assert ran.status_code == 200
    assert (ran.json()["status"], ran.json()["stdout"]) == ("succeeded", "ran\n")


def test_metrics_need_the_token_when_one_is_set(gw: EdgeGateway, roomy: EdgeGateway) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {ACME_KEY}"}):
        refused = httpx.get(gw.url + "/metrics", headers=headers, timeout=30)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "api_key"
    shown = httpx.get(gw.url + "/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"})
    assert shown.status_code == 200 and "lantern_requests_total" in shown.text
    assert httpx.get(roomy.url + "/metrics", timeout=30).status_code == 200  # no token set
