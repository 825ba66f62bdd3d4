"""The doors that run no inference are spans in the client's trace, named and attributed as the
GenAI (and MCP) conventions say: `count_tokens {model}`, a stored response's `fetch_response`,
`list_input_items` and `delete_response`, MCP's `tools/list`; a failure carries `error.type`;
with telemetry off no span is made at all. The real app, two tenants, the wire-level fake
upstream; the spans read from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.settings import load_settings
from tests.fakes.upstream import FakeUpstream

MODEL = "gpt-fake"
KEYS = {"acme": "sk-spans-acme-00000000000000000001", "zeta": "sk-spans-zeta-0000000000000001"}
TRACE_ID, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT}-01"
PROMPT = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}


def _settings(tmp: Path, upstream: FakeUpstream) -> Any:
    (tmp / "policies").mkdir()
    for tenant, key in KEYS.items():
        digest = hashlib.sha256(key.encode()).hexdigest()
        policy: dict[str, Any] = {"tenant": tenant, "api_keys": [{"id": "k1", "sha256": digest}]}
        if tenant == "zeta":  # any prompt of its is refused at admission
            policy["limits"] = {"max_prompt_tokens": 3}
        (tmp / "policies" / f"{tenant}.yaml").write_text(yaml.safe_dump(policy))
    backend = {
        "kind": "openai_compatible",
        "name": "fake",
        "base_url": upstream.openai_base_url,
        "model": "fake-1",
    }
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "door-spans",
        "fleet": {"signal_interval_s": 0},
        "models": [{"name": MODEL, "backends": [backend]}],
        "prices": {MODEL: {"input": 1.0, "output": 2.0}},
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


async def _calls(client: httpx.AsyncClient) -> dict[str, Any]:
    """Every door once or more, in order; each reply's status (and what later calls need)."""

    def auth(tenant: str, **more: str) -> dict[str, str]:
        return {"authorization": f"Bearer {KEYS[tenant]}", "traceparent": TRACEPARENT, **more}

    out: dict[str, Any] = {"statuses": []}

    async def send(method: str, path: str, tenant: str, **kw: Any) -> httpx.Response:
        reply = await client.request(method, path, headers=auth(tenant), **kw)
        out["statuses"].append(reply.status_code)
        return reply

    counted = await send("POST", "/v1/messages/count_tokens", "acme", json=PROMPT)
    out["count"] = counted.json()["input_tokens"]
    await send("POST", "/v1/messages/count_tokens", "acme", json={**PROMPT, "model": "nope"})
    await send("POST", "/v1/messages/count_tokens", "zeta", content=b"{not json")
    made = await send("POST", "/v1/responses", "acme", json={"model": MODEL, "input": "hi"})
    rid = out["response_id"] = made.json()["id"]
    out["response_model"] = made.json()["model"]
    await send("GET", f"/v1/responses/{rid}", "acme")
    await send("GET", f"/v1/responses/{rid}", "zeta")  # another tenant's: not found
    await send("GET", f"/v1/responses/{rid}/input_items", "acme")
    await send("DELETE", f"/v1/responses/{rid}", "acme")
    await send("GET", f"/v1/responses/{rid}", "acme")  # deleted
    return out


async def _unread(client: httpx.AsyncClient) -> dict[str, Any]:
    """A body that never becomes a call at each model door, and one sent without a key."""
    statuses = []
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"):
        headers = {"authorization": f"Bearer {KEYS['zeta']}", "traceparent": TRACEPARENT}
        reply = await client.post(path, content=b"[1, 2", headers=headers)
        statuses.append(reply.status_code)
    anonymous = await client.post("/v1/chat/completions", content=b"[1, 2")
    return {"statuses": [*statuses, anonymous.status_code]}


async def _serve(
    tmp: Path,
    traced: bool,
    calls: Callable[[httpx.AsyncClient], Awaitable[dict[str, Any]]] = _calls,
) -> dict[str, Any]:
    """`traced`: the app's telemetry has a processor. Off, one is put on the tracer provider
    behind the app's back, so a span the doors made anyway would still be seen."""
    with FakeUpstream() as upstream:
        app = create_app(_settings(tmp, upstream))
        parts = app.state.components
        spans = InMemorySpanExporter()
        telemetry = parts.pipeline.s.telemetry
        if traced:
            telemetry.add_span_processor(SimpleSpanProcessor(spans))
        else:
            telemetry.provider.add_span_processor(SimpleSpanProcessor(spans))
            assert telemetry.is_tracing is False
        await parts.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                out = await calls(client)
        finally:
            parts.pipeline.after_reply.flush()
            await parts.stop()
    out["spans"] = list(spans.get_finished_spans())
    return out


def _parent(span: ReadableSpan) -> tuple[str, str]:
    assert span.parent is not None
    return format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def test_each_door_without_inference_is_a_span_in_the_genai_conventions(tmp_path: Path) -> None:
    out = asyncio.run(_serve(tmp_path, traced=True))
    assert out["statuses"] == [200, 404, 400, 200, 200, 404, 200, 200, 404]
    doors = [s for s in out["spans"] if _attrs(s)[ga.GEN_AI_OPERATION_NAME] != "chat"]
    rid, served = out["response_id"], out["response_model"]
    assert [(s.name, s.kind) for s in doors] == [
        (f"count_tokens {MODEL}", SpanKind.SERVER),
        ("count_tokens nope", SpanKind.SERVER),
        ("count_tokens", SpanKind.SERVER),  # no model read: the operation alone
        (f"fetch_response {served}", SpanKind.SERVER),
        ("fetch_response", SpanKind.SERVER),
        ("list_input_items", SpanKind.SERVER),
        ("delete_response", SpanKind.SERVER),
        ("fetch_response", SpanKind.SERVER),
    ]
    for span in doors:  # the client's trace continues through each door
        assert _parent(span) == (TRACE_ID, PARENT)
    count, unknown, garbled, fetched, elsewhere, items, deleted, gone = doors
    base = {"lantern.door": "messages.count_tokens", "lantern.tenant": "acme"}
    # the count is not usage: nothing was consumed, so no gen_ai.usage.* on it
    assert _attrs(count) == {
        **base,
        ga.GEN_AI_OPERATION_NAME: "count_tokens",
        ga.GEN_AI_REQUEST_MODEL: MODEL,
        ga.GEN_AI_PROVIDER_NAME: "openai",
        "lantern.count.input_tokens": out["count"],
        "lantern.count.is_exact": False,
        "lantern.status": "ok",
    }
    assert count.status.status_code is StatusCode.UNSET
    assert _attrs(unknown) == {
        **base,
        ga.GEN_AI_OPERATION_NAME: "count_tokens",
        ga.GEN_AI_REQUEST_MODEL: "nope",
        "lantern.status": "error",
        "error.type": "UnknownModel",
    }
    assert _attrs(garbled) == {
        **base,
        "lantern.tenant": "zeta",
        ga.GEN_AI_OPERATION_NAME: "count_tokens",
        "lantern.status": "error",
        "error.type": "WireFormatError",
    }
    for failed in (unknown, garbled, elsewhere, gone):
        assert failed.status.status_code is StatusCode.ERROR
    stored = {"lantern.door": "responses", ga.GEN_AI_PROVIDER_NAME: "openai"}
    stored[ga.GEN_AI_RESPONSE_ID] = rid
    # a read back runs no inference: its usage was the original call's, not reported again
    assert _attrs(fetched) == {
        **stored,
        ga.GEN_AI_OPERATION_NAME: "fetch_response",
        ga.GEN_AI_RESPONSE_MODEL: served,
        ga.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),  # the stored reply's `completed`
        "lantern.tenant": "acme",
        "lantern.status": "ok",
    }
    # the neighbour asking for acme's response learns nothing of it, nor does its span
    assert _attrs(elsewhere) == {
        **stored,
        ga.GEN_AI_OPERATION_NAME: "fetch_response",
        "lantern.tenant": "zeta",
        "lantern.status": "error",
        "error.type": "ResponseNotFound",
    }
    for span, operation in ((items, "list_input_items"), (deleted, "delete_response")):
        assert _attrs(span) == {
            **stored,
            ga.GEN_AI_OPERATION_NAME: operation,
            "lantern.tenant": "acme",
            "lantern.status": "ok",
        }
    assert _attrs(gone)["error.type"] == "ResponseNotFound"


def test_no_span_is_made_with_telemetry_off(tmp_path: Path) -> None:
    out = asyncio.run(_serve(tmp_path, traced=False))
    assert out["statuses"] == [200, 404, 400, 200, 200, 404, 200, 200, 404]
    assert out["spans"] == []


def test_an_oversized_response_id_is_refused_and_not_recorded(tmp_path: Path) -> None:
    async def main() -> list[ReadableSpan]:
        with FakeUpstream() as upstream:
            app = create_app(_settings(tmp_path, upstream))
            parts = app.state.components
            spans = InMemorySpanExporter()
            parts.pipeline.s.telemetry.add_span_processor(SimpleSpanProcessor(spans))
            await parts.start()
            try:
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    headers = {"authorization": f"Bearer {KEYS['acme']}"}
                    reply = await c.get("/v1/responses/" + "r" * 5000, headers=headers)
                    assert reply.status_code == 400
                    assert orjson.loads(reply.content)["error"]["param"] == "response_id"
            finally:
                await parts.stop()
        return list(spans.get_finished_spans())

    [span] = asyncio.run(main())
    assert span.name == "fetch_response" and span.parent is None  # no traceparent: a new trace
    assert ga.GEN_AI_RESPONSE_ID not in _attrs(span)
    assert _attrs(span)["error.type"] == "WireFormatError"


def test_a_body_that_never_became_a_call_is_a_span_that_says_why(tmp_path: Path) -> None:
    """Refused before a model was read: each model door's span is its operation alone, in the
    client's trace, `rejected` with the error's type; a caller without a key gets none."""
    out = asyncio.run(_serve(tmp_path, traced=True, calls=_unread))
    assert out["statuses"] == [400, 400, 400, 400, 401]
    spans: list[ReadableSpan] = out["spans"]
    doors = ("chat.completions", "messages", "responses", "embeddings")
    assert [(s.name, s.kind, _attrs(s)["lantern.door"]) for s in spans] == [
        ("chat", SpanKind.SERVER, doors[0]),
        ("chat", SpanKind.SERVER, doors[1]),
        ("chat", SpanKind.SERVER, doors[2]),
        ("embeddings", SpanKind.SERVER, doors[3]),
    ]
    for span, door in zip(spans, doors, strict=True):
        assert _parent(span) == (TRACE_ID, PARENT)
        assert span.status.status_code is StatusCode.ERROR
        assert _attrs(span) == {
            ga.GEN_AI_OPERATION_NAME: span.name,
            "lantern.tenant": "zeta",
            "lantern.door": door,
            "lantern.status": "rejected",
            "error.type": "WireFormatError",
        }
    (tmp_path / "off").mkdir()
    untraced = asyncio.run(_serve(tmp_path / "off", traced=False, calls=_unread))
    assert (untraced["statuses"], untraced["spans"]) == (out["statuses"], [])


def test_a_refused_call_records_its_request_and_provider_as_they_were(tmp_path: Path) -> None:
    """A call refused at admission reports the request as the client sent it: no
    `gen_ai.request.max_tokens` when it set none (not 0), the value when it did; and the
    provider of the backend that would have served it (the conventions require one), none
    for a model that has no route."""

    async def refused(client: httpx.AsyncClient) -> dict[str, Any]:
        statuses = []
        for tenant, more in (("acme", {"model": "nope"}), ("zeta", {"max_tokens": 7})):
            headers = {"authorization": f"Bearer {KEYS[tenant]}", "traceparent": TRACEPARENT}
            body = {**PROMPT, **more}
            reply = await client.post("/v1/chat/completions", json=body, headers=headers)
            statuses.append(reply.status_code)
        return {"statuses": statuses}

    out = asyncio.run(_serve(tmp_path, traced=True, calls=refused))
    assert out["statuses"] == [404, 400]
    unknown, capped = out["spans"]
    assert (unknown.name, capped.name) == ("chat nope", f"chat {MODEL}")
    assert ga.GEN_AI_REQUEST_MAX_TOKENS not in _attrs(unknown)
    assert _attrs(capped)[ga.GEN_AI_REQUEST_MAX_TOKENS] == 7
    assert ga.GEN_AI_PROVIDER_NAME not in _attrs(unknown)
    assert _attrs(capped)[ga.GEN_AI_PROVIDER_NAME] == "openai"
    errors = [(_attrs(s)["error.type"], _attrs(s)["lantern.status"]) for s in (unknown, capped)]
    assert errors == [("UnknownModel", "rejected"), ("RequestRejected", "rejected")]
    for span in (unknown, capped):
        assert _parent(span) == (TRACE_ID, PARENT)


def test_a_tool_run_refused_before_it_became_a_run_is_a_span(tmp_path: Path) -> None:
    """`POST /v1/tools/runs` with a body that does not parse: an `execute_tool` span named by
    its operation alone, `rejected` with the sandbox's error code; none with telemetry off."""

    async def broken(client: httpx.AsyncClient) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {KEYS['acme']}", "traceparent": TRACEPARENT}
        reply = await client.post("/v1/tools/runs", content=b'{"tool": ', headers=headers)
        anonymous = await client.post("/v1/tools/runs", content=b'{"tool": ')
        return {"statuses": [reply.status_code, anonymous.status_code]}

    out = asyncio.run(_serve(tmp_path, traced=True, calls=broken))
    assert out["statuses"] == [400, 401]
    [span] = out["spans"]
    assert (span.name, span.kind) == ("execute_tool", SpanKind.SERVER)
    assert _parent(span) == (TRACE_ID, PARENT)
    assert span.status.status_code is StatusCode.ERROR
    assert _attrs(span) == {
        ga.GEN_AI_OPERATION_NAME: "execute_tool",
        "lantern.tenant": "acme",
        "lantern.door": "tools",
        "lantern.status": "rejected",
        "error.type": "invalid_tool_request",
    }
    (tmp_path / "off").mkdir()
    untraced = asyncio.run(_serve(tmp_path / "off", traced=False, calls=broken))
    assert (untraced["statuses"], untraced["spans"]) == ([400, 401], [])
