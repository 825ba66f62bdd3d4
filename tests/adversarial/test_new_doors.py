"""The doors added after the first hostile-input suite, held to its standard against a real
`lantern serve` process: `/v1/messages/count_tokens` and `/v1/embeddings` work a large body off
the event loop and give its memory back; `/admin/*` and `/console/*` check credentials before
reading a byte of the body and apply the body limit; embeddings check the identifiers that every
other door checks; `count_tokens` is a request in the tenant's `requests_per_minute`, held to the
message limit of the call it counts."""

from __future__ import annotations

import select
import socket
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.adversarial.edge_proc import (
    ACME_KEY,
    OTHER_KEY,
    EdgeGateway,
    edge_gateway,
    read_reply,
    request_head,
)
from tests.e2e.harness import ADMIN_TOKEN

MIB = 1024 * 1024
BIG_TEXT = "lorem ipsum dolor sit amet " * (28 * MIB // 27)  # 28 MiB, under the 32 MiB limit
NUM_BIG = 8  # four to each door
RSS_BOUND_KIB = 150 * 1024  # the bound over eight such bodies
# `/healthz` while a big body is worked: answered (the event loop used to be held for 4-7 s,
# every health check waiting for the big reply), typically within the 0.5 s; the
# median, not the worst, so that a loaded test machine's pauses do not decide the test
HEALTH_BOUND_S = 0.5
ANSWER_BOUND_S = 2.0  # an admin call with a body declared and never sent


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeGateway]:
    with edge_gateway(tmp_path_factory.mktemp("doors")) as gateway:
        yield gateway


def auth(key: str = ACME_KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "content-type": "application/json"}


def big_body(door: str) -> bytes:
    if door == "/v1/embeddings":
        return orjson.dumps({"model": "gpt-4o-mini", "input": BIG_TEXT})
    message = {"role": "user", "content": BIG_TEXT}
    return orjson.dumps({"model": "gpt-4o-mini", "messages": [message]})


def health_while_pending(gw: EdgeGateway, sock: socket.socket) -> list[float]:
    """`/healthz` asked again and again until `sock` has its reply: how long each answer took
    that came while the reply was still pending (seconds)."""
    took_s: list[float] = []
    with httpx.Client(base_url=gw.url, timeout=30) as client:
        while not _has_reply(sock):
            began = time.monotonic()
            assert client.get("/healthz").json() == {"status": "ok"}
            if not _has_reply(sock):
                took_s.append(time.monotonic() - began)
            time.sleep(0.05)
    return took_s


def _has_reply(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_big_bodies_are_worked_off_the_loop_and_memory_comes_back(gw: EdgeGateway) -> None:
    doors = ["/v1/messages/count_tokens", "/v1/embeddings"] * (NUM_BIG // 2)
    bodies = {door: big_body(door) for door in set(doors)}
    rss_before = gw.rss_kib()
    for door in doors:
        with gw.connect() as sock:
            head = {**auth(), "content-length": str(len(bodies[door]))}
            sock.sendall(request_head(door, head) + bodies[door])
            took_s = health_while_pending(gw, sock)
            reply = read_reply(sock)
        assert took_s, f"{door}: /healthz was not answered while the body was worked"
        assert statistics.median(took_s) < HEALTH_BOUND_S, (door, took_s)
        assert reply.status < 500 or door == "/v1/embeddings"  # the fake has no embeddings
    grown_kib = gw.rss_kib() - rss_before
    assert grown_kib < RSS_BOUND_KIB, f"RSS grew {grown_kib // 1024} MiB over {NUM_BIG} bodies"


def test_count_tokens_is_the_count_the_call_is_billed(gw: EdgeGateway) -> None:
    """The count is of the prompt as the gateway sends it, the tenant's scope line included
    (the fake provider has no count_tokens: the gateway counts, as it does for the bill)."""
    small = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "how many tokens is this?"}],
    }
    door = gw.url + "/v1/messages/count_tokens"
    counted = httpx.post(door, json=small, headers=auth(), timeout=30)
    assert counted.status_code == 200
    assert counted.headers["x-lantern-token-count"] == "estimate"
    served = httpx.post(gw.url + "/v1/messages", json=small, headers=auth(), timeout=30)
    assert served.status_code == 200
    assert counted.json() == {"input_tokens": served.json()["usage"]["input_tokens"]}


def test_count_tokens_holds_the_message_limit_of_the_call_it_counts(gw: EdgeGateway) -> None:
    """A count of more messages than any call may carry is refused as that call would be,
    not parsed, prepared, counted and sent to the provider's counter."""
    messages = [{"role": "user", "content": "a"}] * 100_001  # the gateway's limit: 100,000
    body = {"model": "claude-sonnet-4-5", "messages": messages}
    upstream_before = len(gw.upstream.requests)
    headers = {**auth(), "anthropic-version": "2023-06-01"}
    reply = httpx.post(gw.url + "/v1/messages/count_tokens", json=body, headers=headers, timeout=60)
    assert (reply.status_code, reply.json()) == (
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "messages: 100001; the gateway's limit is 100000",
            },
        },
    )
    assert len(gw.upstream.requests) == upstream_before


@pytest.mark.parametrize("door", ["/admin/keys", "/admin/keys/k1/expire", "/console/login"])
def test_a_declared_100_mib_admin_body_is_answered_at_once(gw: EdgeGateway, door: str) -> None:
    for headers, status in (({}, 401), ({"authorization": f"Bearer {ADMIN_TOKEN}"}, 413)):
        if door == "/console/login":  # the token is in the form: only the limit applies
            status = 413
        with gw.connect() as sock:
            sock.settimeout(ANSWER_BOUND_S)
            head = {**headers, "content-type": "application/json", "content-length": str(100 * MIB)}
            sock.sendall(request_head(door, head))  # not one byte of the body follows
            reply = read_reply(sock)
        assert reply.status == status, (door, headers, reply)


def test_a_console_form_post_without_a_session_is_not_read(gw: EdgeGateway) -> None:
    with gw.connect() as sock:
        sock.settimeout(ANSWER_BOUND_S)
        head = {"content-type": "application/x-www-form-urlencoded"}
        sock.sendall(request_head("/console/keys", {**head, "content-length": str(100 * MIB)}))
        reply = read_reply(sock)
    assert (reply.status, reply.headers["location"]) == (303, "/console/login")


def test_admin_keys_without_a_token_is_401_whatever_the_body(gw: EdgeGateway) -> None:
    for body in (b"nope", b"", b"[]", b'{"tenant": "acme"}'):
        reply = httpx.post(gw.url + "/admin/keys", content=body, timeout=30)
        assert reply.status_code == 401, (body, reply.text)
        assert reply.json()["error"]["code"] == "api_key"


def test_admin_keys_with_a_token_and_a_bad_body_is_400(gw: EdgeGateway) -> None:
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    for body in (b"nope", b"[]"):
        reply = httpx.post(gw.url + "/admin/keys", content=body, headers=headers, timeout=30)
        assert reply.status_code == 400, (body, reply.text)
        assert reply.json()["error"]["code"] == "bad_key_request"


BAD_IDENTIFIERS = [  # (body fields, headers, the field named)
    ({"user": "alice\x07"}, {}, "user"),
    ({"user": "ünïcode"}, {}, "user"),
    ({"user": "u" * 257}, {}, "user"),
    ({}, {"x-session-id": "s" * 257}, "x-session-id"),
]


@pytest.mark.parametrize(("fields", "headers", "field"), BAD_IDENTIFIERS)
def test_embeddings_checks_identifiers(
    gw: EdgeGateway, fields: dict[str, str], headers: dict[str, str], field: str
) -> None:
    upstream_before = len(gw.upstream.requests)
    body = {"model": "gpt-4o-mini", "input": "hello", **fields}
    reply = httpx.post(
        gw.url + "/v1/embeddings", json=body, headers={**auth(), **headers}, timeout=30
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "identifier",
        field,
    )
    assert len(gw.upstream.requests) == upstream_before  # nothing forwarded


def test_count_tokens_counts_against_requests_per_minute(tmp_path: Path) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    with edge_gateway(tmp_path, other_limits={"requests_per_minute": 3}) as gw:
        statuses = [
            httpx.post(
                gw.url + "/v1/messages/count_tokens", json=body, headers=auth(OTHER_KEY), timeout=30
            ).status_code
            for _ in range(5)
        ]
    assert statuses == [200, 200, 200, 429, 429]
