"""Ledger reconciliation: calls through both doors (OpenAI chat, Anthropic messages), streamed
and not, with upstream errors (before the answer, and a stream cut mid-answer) and clients that
hang up mid-stream, against a real `lantern serve` process. Exactly one ledger row per upstream
call attempt, and each row's tokens are what the upstream reported for that attempt."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from adapters.types import ChatRequest, ChatResponse, Usage
from tests.adversarial.ledger_harness import (
    KEY,
    GatewayProcess,
    gateway_config,
    model_entry,
    running,
)
from tests.fakes.asgi_replies import error_body, respond
from tests.fakes.upstream import FakeUpstream, FakeUpstreamApp, Send

pytestmark = pytest.mark.slow
DOORS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
# what happens to a call: the upstream answers, fails before answering (500, 400), cuts the
# stream after a few events, or the client hangs up after the first chunk
KINDS = ("ok", "upstream_500", "upstream_400", "stream_cut", "client_gone")
_CALL_TAG = re.compile(r"call (\d+):")


class ReportingUpstream(FakeUpstreamApp):
    """The fake upstream, noting the usage it reports for each call (by the call's tag)."""

    def __init__(self) -> None:
        super().__init__()
        self.reported: dict[int, Usage] = {}
        self.failing: dict[int, int] = {}  # call -> HTTP status its every attempt gets
        self._guard = threading.Lock()

    async def _complete(self, wire: str, raw: bytes, send: Send, api_key: str = "") -> None:
        status = self.failing.get(call_number(raw.decode()) or -1)
        if status is None:
            await super()._complete(wire, raw, send, api_key)
        else:  # only the tagged call fails, never the gateway's health probe
            await respond(send, status, error_body(wire, "injected failure", "api_error"))

    def _reply(
        self, wire: str, body: dict[str, Any], req: ChatRequest, api_key: str = ""
    ) -> ChatResponse:
        resp = super()._reply(wire, body, req, api_key)
        n = call_number(str(body.get("messages")))
        if n is not None:  # not the gateway's health probe
            with self._guard:
                self.reported[n] = resp.usage
        return resp


@dataclass(frozen=True)
class Call:
    n: int
    wire: str
    stream: bool
    kind: str

    @property
    def model(self) -> str:
        """Each call has its own model and backend: a backend taken out of service by one
        call's fault (for its health cooldown) serves no other call of the test."""
        return f"m{self.n:03d}-{self.wire}"


def call_number(text: str) -> int | None:
    found = _CALL_TAG.search(text)
    return None if found is None else int(found.group(1))


def plan() -> list[Call]:
    calls: list[Call] = []
    for wire in DOORS:
        for stream in (False, True):
            for kind in KINDS:
                if kind in ("stream_cut", "client_gone") and not stream:
                    continue
                for _ in range(2):
                    calls.append(Call(len(calls), wire, stream, kind))
    return calls


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    fake.app = ReportingUpstream()  # before start: the server is handed the reporting app
    fake._server.config.app = fake.app
    with fake:
        yield fake


def send(client: httpx.Client, url: str, upstream: FakeUpstream, call: Call) -> int:
    """Makes the call; returns the HTTP status the client saw (0: it hung up)."""
    app = upstream.app
    assert isinstance(app, ReportingUpstream)
    app.drop_stream_after = 3 if call.kind == "stream_cut" else None
    app.chunk_delay_s = 0.05 if call.kind == "client_gone" else 0.0
    if call.kind in ("upstream_500", "upstream_400"):
        app.failing[call.n] = int(call.kind[-3:])
    path = DOORS[call.wire]
    body = {
        "model": call.model,
        "max_tokens": 64,
        "stream": call.stream,
        "messages": [{"role": "user", "content": f"call {call.n}: words:{5 + call.n}"}],
    }
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": f"call-{call.n:03d}"}
    with client.stream("POST", url + path, json=body, headers=headers) as response:
        if call.kind == "client_gone":
            next(response.iter_raw())  # the first chunk, then hang up
            return 0
        with contextlib.suppress(httpx.HTTPError):  # a cut stream may end the reply abruptly
            response.read()
        return response.status_code


def ledger_rows(database_url: str) -> dict[int, list[dict[str, Any]]]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT * FROM usage")).mappings().all()
    finally:
        engine.dispose()
    by_call: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_call.setdefault(int(row["session_id"].removeprefix("call-")), []).append(dict(row))
    return by_call


def expected_row(call: Call, reported: Usage | None) -> tuple[str, int, int, int, int]:
    """(status, input, cache read, cache write, output) the ledger must hold for one call."""
    if call.kind in ("upstream_500", "upstream_400"):
        return ("error", 0, 0, 0, 0)  # the upstream answered nothing billable
    assert reported is not None
    if call.kind == "ok":
        u = reported
        return ("ok", u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens)
    raise AssertionError(call.kind)


def test_one_row_per_upstream_attempt_with_the_upstreams_token_counts(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    database_url = f"sqlite:///{tmp_path}/var/lantern.db"
    calls = plan()
    models = [model_entry(upstream, c.wire, c.model, f"backend-{c.n:03d}") for c in calls]
    config = gateway_config(tmp_path / "var", upstream, database_url, models)
    with running(GatewayProcess(config, tmp_path / "gateway.log")) as gateway:
        with httpx.Client(timeout=30) as client:
            statuses = {call.n: send(client, gateway.url, upstream, call) for call in calls}
        attempts: dict[int, int] = {}
        for request in upstream.requests:
            if request.path not in ("/v1/chat/completions", "/v1/messages"):
                continue  # the gateway's metrics scrapes
            n = call_number(str(request.json().get("messages")))
            if n is not None:  # not a health probe
                attempts[n] = attempts.get(n, 0) + 1
    rows = ledger_rows(database_url)  # the gateway has stopped: everything is written
    assert {n: len(r) for n, r in rows.items()} == attempts  # one row per upstream attempt
    assert attempts == {call.n: 1 for call in calls}  # one backend: one attempt each
    reported = upstream.app.reported
    for call in calls:
        (row,) = rows[call.n]
        got = (
            row["status"],
            row["input_tokens"],
            row["cache_read_tokens"],
            row["cache_write_tokens"],
            row["output_tokens"],
        )
        if call.kind in ("stream_cut", "client_gone"):
            # the upstream's final usage never came: the prompt as reported (or counted), and
            # at most what the upstream would have reported for the whole answer
            u = reported[call.n]
            status = "error" if call.kind == "stream_cut" else "client_disconnect"
            assert (got[0], got[1]) == (status, u.input_tokens), call
            assert got[4] < u.output_tokens, call
        else:
            assert got == expected_row(call, reported.get(call.n)), call
    assert {n for n, s in statuses.items() if s == 200} == {
        c.n for c in calls if c.kind in ("ok", "stream_cut") and (c.kind == "ok" or c.stream)
    }
