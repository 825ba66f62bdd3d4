"""Slow clients against a real `lantern serve` process with 1 s read deadlines: a connection
whose headers or body stop short is closed by the server at the deadline (uvicorn alone
holds it for ever), and the gateway keeps serving meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.adversarial.edge_proc import (
    ACME_KEY,
    EdgeGateway,
    edge_gateway,
    read_reply,
    read_until_closed,
    request_head,
)

REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
NUM_STALLED = 20


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EdgeGateway]:
    var_dir = tmp_path_factory.mktemp("slow")
    with edge_gateway(var_dir, header_timeout_s=1.0, body_timeout_s=1.0) as gateway:
        yield gateway


def test_incomplete_headers_are_closed_at_the_deadline(gw: EdgeGateway) -> None:
    stalled = [gw.connect() for _ in range(NUM_STALLED)]
    for sock in stalled:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-")
    assert httpx.get(gw.url + "/healthz", timeout=30).status_code == 200
    for sock in stalled:
        with sock:
            assert read_until_closed(sock) == REQUEST_TIMEOUT


def test_a_connection_that_sends_nothing_is_closed(gw: EdgeGateway) -> None:
    with gw.connect() as sock:
        assert read_until_closed(sock) == REQUEST_TIMEOUT


def test_incomplete_body_is_closed_at_the_deadline(gw: EdgeGateway) -> None:
    head = {"authorization": f"Bearer {ACME_KEY}", "content-length": "1000"}
    with gw.connect() as sock:
        sock.sendall(request_head("/v1/chat/completions", head) + b'{"model": "gpt-4o')
        assert read_until_closed(sock) == b""  # closed; nobody is left to read a reply
    assert "unexpected error" not in gw.log.read_text()


def test_next_request_on_a_kept_alive_connection_has_its_own_deadline(gw: EdgeGateway) -> None:
    with gw.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        reply = read_reply(sock)
        assert (reply.status, reply.body) == (200, b'{"status":"ok"}')
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")  # no blank line: stalls
        assert read_until_closed(sock) == REQUEST_TIMEOUT


def test_an_idle_kept_alive_connection_outlives_the_clients_pool(gw: EdgeGateway) -> None:
    """httpx keeps an idle connection pooled for 5 s, uvicorn's default keep-alive: a client that
    sends on it at 5 s could meet the server closing it. The gateway keeps it longer."""
    with gw.connect() as sock:
        for pause_s in (6.0, 0.0):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            reply = read_reply(sock)
            assert (reply.status, reply.body) == (200, b'{"status":"ok"}')
            time.sleep(pause_s)


def test_an_idle_kept_alive_connection_is_closed_after_keep_alive_s(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The keep-alive wait is a deadline of the server's sweep, not a timer per response: the
    connection is closed after `keep_alive_s` (at most a sweep late), without a 408, and a
    request sent before then is served."""
    var_dir = tmp_path_factory.mktemp("keep-alive")
    with edge_gateway(var_dir, keep_alive_s=2) as gw, gw.connect() as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            assert read_reply(sock).status == 200
            time.sleep(1.0)  # within keep_alive_s: still open
        started = time.monotonic()
        assert read_until_closed(sock) == b""
        assert 0.5 <= time.monotonic() - started <= 3.0
