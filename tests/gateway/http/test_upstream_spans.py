"""The spans of what the gateway sends upstream, and of calls that reach no upstream, as the
GenAI conventions describe them: a provider's `count_tokens` is a client span under the door's
span whose context goes upstream in `traceparent`; each upstream attempt names the server it
went to (`server.address`, `server.port`); a stored response read back says how its generation
ended; a Responses call refused after its body was read is named by the model it asked for.
The real app, wire-level fakes (OpenAI-compatible and Anthropic), the SDK's in-memory
exporter."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.ports import ServerAddress
from gateway.settings import load_settings
from gateway.telemetry.traces import server_of
from tests.fakes.claude import COUNT_TOKENS, FakeClaude
from tests.fakes.upstream import FakeUpstream

MODEL, CLAUDE = "gpt-fake", "claude-fake"
KEY = "sk-upstream-spans-acme-000000001"
TRACE_ID, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
HEADERS = {"authorization": f"Bearer {KEY}", "traceparent": f"00-{TRACE_ID}-{PARENT}-01"}
COUNT = {"model": CLAUDE, "messages": [{"role": "user", "content": "hello there"}]}

Calls = Callable[[httpx.AsyncClient], Awaitable[list[httpx.Response]]]


def _closed_url() -> str:
    """An address where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _settings(tmp: Path, upstream: FakeUpstream, claude_url: str) -> Any:
    (tmp / "policies").mkdir()
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    policy = {"tenant": "acme", "api_keys": [{"id": "k1", "sha256": digest}]}
    (tmp / "policies" / "acme.yaml").write_text(yaml.safe_dump(policy))
    openai = {"kind": "openai_compatible", "name": "fake", "model": "fake-1"}
    openai["base_url"] = upstream.openai_base_url
    anthropic = {"kind": "anthropic", "name": "claude", "model": "claude-1", "api_key_env": None}
    anthropic["base_url"] = claude_url
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "upstream-spans",
        "fleet": {"signal_interval_s": 0},
        "models": [
            {"name": MODEL, "backends": [openai]},
            {"name": CLAUDE, "backends": [anthropic]},
        ],
        "prices": {m: {"input": 1.0, "output": 2.0} for m in (MODEL, CLAUDE)},
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


def _serve(
    tmp: Path, calls: Calls, traced: bool = True, claude_down: bool = False
) -> dict[str, Any]:
    """`calls` against the app, its spans, and what reached each fake; `claude_down`: the
    Anthropic backend's URL is one where nothing listens."""

    async def main() -> dict[str, Any]:
        with FakeUpstream() as upstream, FakeClaude() as claude:
            claude_url = _closed_url() if claude_down else claude.base_url
            app = create_app(_settings(tmp, upstream, claude_url))
            parts = app.state.components
            spans = InMemorySpanExporter()
            if traced:
                parts.pipeline.s.telemetry.add_span_processor(SimpleSpanProcessor(spans))
            await parts.start()
            try:
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    replies = await calls(c)
            finally:
                parts.pipeline.after_reply.flush()
                await parts.stop()
            return {
                "replies": replies,
                "spans": list(spans.get_finished_spans()),
                "claude": list(claude.app.requests),
                "claude_port": claude.port,
                "upstream_port": int(upstream.openai_base_url.split(":")[-1].split("/")[0]),
            }

    return asyncio.run(main())


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def _ids(span: ReadableSpan) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def _parent(span: ReadableSpan) -> tuple[str, str]:
    assert span.parent is not None
    return format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")


async def _count(client: httpx.AsyncClient) -> list[httpx.Response]:
    return [await client.post("/v1/messages/count_tokens", json=COUNT, headers=HEADERS)]


def test_a_providers_count_is_a_client_span_whose_context_goes_upstream(tmp_path: Path) -> None:
    out = _serve(tmp_path, _count)
    [reply] = out["replies"]
    assert (reply.status_code, reply.json()) == (200, {"input_tokens": COUNT_TOKENS})
    assert reply.headers["x-lantern-token-count"] == "exact"
    client, door = out["spans"]  # the client span ends first
    assert (door.name, door.kind) == (f"count_tokens {CLAUDE}", SpanKind.SERVER)
    assert (client.name, client.kind) == (f"count_tokens {CLAUDE}", SpanKind.CLIENT)
    assert _parent(door) == (TRACE_ID, PARENT)
    assert _parent(client) == _ids(door)
    [sent] = [r for r in out["claude"] if r.path == "/v1/messages/count_tokens"]
    assert sent.headers["traceparent"] == f"00-{TRACE_ID}-{_ids(client)[1]}-01"
    assert _attrs(client) == {
        ga.GEN_AI_OPERATION_NAME: "count_tokens",
        ga.GEN_AI_REQUEST_MODEL: CLAUDE,
        ga.GEN_AI_PROVIDER_NAME: "anthropic",
        "lantern.backend": "claude",
        "lantern.tenant": "acme",
        "lantern.status": "ok",
        "server.address": "127.0.0.1",
        "server.port": out["claude_port"],
    }
    assert _attrs(door) == {
        ga.GEN_AI_OPERATION_NAME: "count_tokens",
        ga.GEN_AI_REQUEST_MODEL: CLAUDE,
        ga.GEN_AI_PROVIDER_NAME: "anthropic",
        "lantern.count.input_tokens": COUNT_TOKENS,
        "lantern.count.is_exact": True,
        "lantern.tenant": "acme",
        "lantern.door": "messages.count_tokens",
        "lantern.status": "ok",
    }


def test_a_failed_providers_count_is_an_error_span_and_the_estimate_answers(
    tmp_path: Path,
) -> None:
    """The provider cannot be reached: the client span says why, the door answers the
    gateway's estimate."""
    out = _serve(tmp_path, _count, claude_down=True)
    [reply] = out["replies"]
    assert reply.status_code == 200 and reply.headers["x-lantern-token-count"] == "estimate"
    client, door = out["spans"]
    assert (client.kind, _parent(client)) == (SpanKind.CLIENT, _ids(door))
    assert client.status.status_code is StatusCode.ERROR
    assert (_attrs(client)["lantern.status"], _attrs(client)["error.type"]) == (
        "error",
        "ProviderUnavailable",
    )
    assert door.status.status_code is StatusCode.UNSET
    assert _attrs(door)["lantern.count.is_exact"] is False


def test_an_untraced_count_sends_no_trace_context_upstream(tmp_path: Path) -> None:
    async def untraced(client: httpx.AsyncClient) -> list[httpx.Response]:
        headers = {"authorization": HEADERS["authorization"]}
        return [await client.post("/v1/messages/count_tokens", json=COUNT, headers=headers)]

    out = _serve(tmp_path, untraced, traced=False)
    assert [r.status_code for r in out["replies"]] == [200]
    [sent] = [r for r in out["claude"] if r.path == "/v1/messages/count_tokens"]
    assert "traceparent" not in sent.headers
    assert out["spans"] == []


def test_each_upstream_attempt_names_the_server_it_went_to(tmp_path: Path) -> None:
    async def chats(client: httpx.AsyncClient) -> list[httpx.Response]:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        claude = {**COUNT, "max_tokens": 5}
        return [
            await client.post("/v1/chat/completions", json=body, headers=HEADERS),
            await client.post("/v1/messages", json=claude, headers=HEADERS),
        ]

    out = _serve(tmp_path, chats)
    assert [r.status_code for r in out["replies"]] == [200, 200]
    attempts = [s for s in out["spans"] if s.kind is SpanKind.CLIENT]
    assert [(s.name, _attrs(s)["server.address"], _attrs(s)["server.port"]) for s in attempts] == [
        (f"chat {MODEL}", "127.0.0.1", out["upstream_port"]),
        (f"chat {CLAUDE}", "127.0.0.1", out["claude_port"]),
    ]
    for server in (s for s in out["spans"] if s.kind is SpanKind.SERVER):
        assert "server.address" not in _attrs(server)  # the gateway's own span is not upstream


def test_an_upstream_url_names_its_host_and_port() -> None:
    assert server_of("https://api.anthropic.com") == ServerAddress("api.anthropic.com", 443)
    assert server_of("http://10.1.2.80/v1") == ServerAddress("10.1.2.80", 80)
    assert server_of("http://vllm:8000/v1") == ServerAddress("vllm", 8000)
    assert server_of("http://[::1]:9000/v1") == ServerAddress("::1", 9000)
    assert server_of(None) is None
    assert server_of("") is None
    assert server_of("/v1/no-host") is None
    assert server_of("http://host:99999/v1") is None  # not a port: nothing rather than a lie


def test_a_fetched_response_says_how_its_generation_ended(tmp_path: Path) -> None:
    async def made_and_read(client: httpx.AsyncClient) -> list[httpx.Response]:
        replies = []
        for more in ({}, {"max_output_tokens": 2}):
            body = {"model": MODEL, "input": "hello there", **more}
            made = await client.post("/v1/responses", json=body, headers=HEADERS)
            replies.append(made)
            path = f"/v1/responses/{made.json()['id']}"
            replies.append(await client.get(path, headers=HEADERS))
        return replies

    out = _serve(tmp_path, made_and_read)
    replies = out["replies"]
    assert [r.status_code for r in replies] == [200, 200, 200, 200]
    assert [r.json()["status"] for r in replies] == ["completed"] * 2 + ["incomplete"] * 2
    fetched = [s for s in out["spans"] if s.name.startswith("fetch_response")]
    assert [_attrs(s)[ga.GEN_AI_RESPONSE_FINISH_REASONS] for s in fetched] == [
        ("stop",),
        ("max_output_tokens",),
    ]
    assert [_attrs(s)[ga.GEN_AI_RESPONSE_ID] for s in fetched] == [
        replies[0].json()["id"],
        replies[2].json()["id"],
    ]


def test_a_responses_call_refused_after_its_body_was_read_is_named_by_its_model(
    tmp_path: Path,
) -> None:
    async def unknown_previous(client: httpx.AsyncClient) -> list[httpx.Response]:
        body: dict[str, Any] = {"model": MODEL, "input": "hi", "max_output_tokens": 9}
        body["previous_response_id"] = "resp_nope"
        return [await client.post("/v1/responses", json=body, headers=HEADERS)]

    out = _serve(tmp_path, unknown_previous)
    [reply] = out["replies"]
    assert reply.status_code == 404
    assert reply.json()["error"]["param"] == "previous_response_id"
    [span] = out["spans"]
    assert (span.name, span.kind) == (f"chat {MODEL}", SpanKind.SERVER)
    assert _parent(span) == (TRACE_ID, PARENT)
    assert span.status.status_code is StatusCode.ERROR
    attrs = _attrs(span)
    assert attrs[ga.GEN_AI_REQUEST_MODEL] == MODEL
    assert attrs[ga.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[ga.GEN_AI_REQUEST_MAX_TOKENS] == 9
    assert (attrs["error.type"], attrs["lantern.status"]) == ("ResponseNotFound", "rejected")
    assert (attrs["lantern.door"], attrs["lantern.tenant"]) == ("responses", "acme")
