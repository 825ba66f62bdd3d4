"""`/v1/embeddings` is metered and traced as the chat doors are, in OpenTelemetry's GenAI
conventions (`gen_ai.operation.name` = `embeddings`): the GenAI client metrics and Lantern's own
by tenant; a server span in the client's trace with a client span for the upstream call, whose
context reaches the upstream; a refusal's span says why; an upstream failure is an error on
both spans and in the metrics. The real app, policies, quota store and ledger, two tenants, the
wire-level embeddings fake upstream and one that cannot be reached."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine
from sqlalchemy import text as text_

from adapters.tokens import TokenCounter
from bench._procs import free_port
from gateway.app import create_app
from gateway.core.embedding_telemetry import dimension_count
from gateway.settings import load_settings
from tests.fakes.embeddings import FakeEmbeddings

MODEL, DEAD = "text-embedding-3-small", "embed-unreachable"
KEYS = {"acme": "sk-embed-acme-0000000000000000000001", "zeta": "sk-embed-zeta-00000000000000001"}
TRACE_ID, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT}-01"


def _settings(tmp: Path, upstream: FakeEmbeddings) -> Any:
    (tmp / "policies").mkdir()
    for tenant, key in KEYS.items():
        digest = hashlib.sha256(key.encode()).hexdigest()
        policy: dict[str, Any] = {"tenant": tenant, "api_keys": [{"id": "k1", "sha256": digest}]}
        if tenant == "zeta":
            policy["limits"] = {"max_prompt_tokens": 3}
        (tmp / "policies" / f"{tenant}.yaml").write_text(yaml.safe_dump(policy))
    fake = {"kind": "openai_compatible", "name": "fake-embed", "base_url": upstream.base_url}
    dead = {
        "kind": "openai_compatible",
        "name": "dead-embed",
        "base_url": f"http://127.0.0.1:{free_port()}/v1",  # nothing listens there
    }
    config = {
        "database_url": f"sqlite:///{tmp}/lantern.db",
        "policy_dir": str(tmp / "policies"),
        "var_dir": str(tmp),
        "server_secret": "embed-telemetry",
        "fleet": {"signal_interval_s": 0},
        "models": [
            {"name": MODEL, "backends": [{**fake, "model": "te3"}]},
            {"name": DEAD, "backends": [{**dead, "model": "te3"}]},
        ],
        "prices": {MODEL: {"input": 0.02, "output": 0.0}, DEAD: {"input": 0.02, "output": 0.0}},
    }
    (tmp / "lantern.yaml").write_text(yaml.safe_dump(config))
    return load_settings(tmp / "lantern.yaml")


async def _serve(tmp: Path, traced: bool, broken: bool = False) -> dict[str, Any]:
    """Each call's status, the spans, the metrics' text and the upstream's requests;
    `broken`: recording the metrics raises."""
    with FakeEmbeddings() as upstream:
        app = create_app(_settings(tmp, upstream))
        parts = app.state.components
        spans = InMemorySpanExporter()
        if traced:
            parts.pipeline.s.telemetry.add_span_processor(SimpleSpanProcessor(spans))
        if broken:

            def refuse(*_: object) -> None:
                raise RuntimeError("the metrics are broken")

            parts.pipeline.s.telemetry.metrics.record_attempt = refuse
        await parts.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:

                async def embed(tenant: str, body: dict[str, Any], trace: bool = True) -> int:
                    headers = {"authorization": f"Bearer {KEYS[tenant]}", "x-session-id": "s1"}
                    if trace:
                        headers["traceparent"] = TRACEPARENT
                    reply = await client.post("/v1/embeddings", json=body, headers=headers)
                    return reply.status_code

                statuses = [
                    await embed("acme", {"model": MODEL, "input": ["a b c", "d e"]}),
                    await embed("zeta", {"model": MODEL, "input": "one two three four"}),
                    await embed("acme", {"model": DEAD, "input": "x"}),
                    await embed(
                        "zeta", {"model": MODEL, "input": "f", "encoding_format": "float"}, False
                    ),
                ]
                metrics = (await client.get("/metrics")).text
        finally:
            parts.pipeline.after_reply.flush()
            await parts.stop()
        forwarded = [r for r in upstream.app.requests if r.path == "/v1/embeddings"]
    return {
        "statuses": statuses,
        "spans": list(spans.get_finished_spans()),
        "metrics": metrics,
        "traceparents": [r.headers.get("traceparent") for r in forwarded],
    }


def _ledger_ids(tmp: Path) -> list[tuple[str, str, str]]:
    engine = create_engine(f"sqlite:///{tmp}/lantern.db")
    query = text_("SELECT tenant, model, request_id FROM usage ORDER BY ts")
    with engine.connect() as conn:
        rows = [(r[0], r[1], r[2]) for r in conn.execute(query)]
    engine.dispose()
    return rows


def _samples(metrics: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """`name`'s samples, keyed by their sorted labels."""
    out = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _hex(span: ReadableSpan, parent: bool = False) -> str:
    context = span.parent if parent else span.context
    assert context is not None
    return format(context.span_id, "016x")


def test_embeddings_calls_are_traced_in_the_genai_conventions(tmp_path: Path) -> None:
    out = asyncio.run(_serve(tmp_path, traced=True))
    assert out["statuses"] == [200, 400, 502, 200]
    spans: list[ReadableSpan] = out["spans"]
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    clients = [s for s in spans if s.kind is SpanKind.CLIENT]
    assert [s.name for s in servers] == [f"embeddings {MODEL}"] * 2 + [f"embeddings {DEAD}"] + [
        f"embeddings {MODEL}"
    ]
    served, refused, failed, untraced = servers
    # the client's trace continues through the gateway; each upstream call is a child span
    for span in (served, refused, failed):
        assert span.context is not None and format(span.context.trace_id, "032x") == TRACE_ID
        assert _hex(span, parent=True) == PARENT
    assert untraced.parent is None  # no `traceparent`: a trace of its own
    assert [_hex(c, parent=True) for c in clients] == [_hex(served), _hex(failed), _hex(untraced)]
    # what reached the upstream carries the client span's context; the dead one got nothing
    assert [tp.rsplit("-", 1)[0] for tp in out["traceparents"]] == [
        f"00-{TRACE_ID}-{_hex(clients[0])}",
        f"00-{format(untraced.context.trace_id, '032x')}-{_hex(clients[2])}",  # type: ignore[union-attr]
    ]
    attrs = dict(served.attributes or {})
    assert attrs[ga.GEN_AI_OPERATION_NAME] == "embeddings"
    assert attrs[ga.GEN_AI_REQUEST_MODEL] == MODEL
    assert attrs[ga.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[ga.GEN_AI_USAGE_INPUT_TOKENS] == 5  # the upstream's count
    assert attrs[ga.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] == 3
    assert attrs[ga.GEN_AI_RESPONSE_MODEL] == "te3"  # the upstream's own name
    assert attrs[ga.GEN_AI_CONVERSATION_ID] == "s1"
    assert attrs["lantern.cost_usd"] == pytest.approx(5 * 0.02 / 1e6)
    assert (attrs["lantern.tenant"], attrs["lantern.door"], attrs["lantern.status"]) == (
        "acme",
        "embeddings",
        "ok",
    )
    # chat's request fields do not apply to an embeddings call; no text is ever recorded
    for absent in (
        ga.GEN_AI_REQUEST_MAX_TOKENS,
        ga.GEN_AI_REQUEST_STREAM,
        ga.GEN_AI_INPUT_MESSAGES,
    ):
        assert absent not in attrs
    assert ga.GEN_AI_REQUEST_ENCODING_FORMATS not in attrs  # not asked
    assert dict(untraced.attributes or {})[ga.GEN_AI_REQUEST_ENCODING_FORMATS] == ("float",)
    # the span and the ledger row name the same call
    ledger = _ledger_ids(tmp_path)
    assert [(t, m) for t, m, _ in ledger] == [("acme", MODEL), ("acme", DEAD), ("zeta", MODEL)]
    assert attrs["lantern.request_id"] == ledger[0][2]
    assert dict(failed.attributes or {})["lantern.request_id"] == ledger[1][2]
    # refused before any upstream call: the span says why, and no client span was begun
    assert refused.status.status_code is StatusCode.ERROR
    refusal = dict(refused.attributes or {})
    assert (refusal["error.type"], refusal["lantern.status"]) == ("RequestRejected", "rejected")
    assert refusal["lantern.tenant"] == "zeta"
    assert refusal[ga.GEN_AI_PROVIDER_NAME] == "openai"  # the backend that would have served it
    # the unreachable upstream: an error on the attempt's span and the call's
    for span in (failed, clients[1]):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "ProviderUnavailable"


def test_embeddings_calls_are_metered_by_tenant_and_operation(tmp_path: Path) -> None:
    out = asyncio.run(_serve(tmp_path, traced=False))
    assert out["statuses"] == [200, 400, 502, 200]
    assert out["spans"] == []
    assert out["traceparents"] == [None, None]  # nothing traced: no context sent upstream
    tokens = _samples(out["metrics"], "gen_ai_client_token_usage_sum")
    base = {
        "gen_ai_operation_name": "embeddings",
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": MODEL,
        "gen_ai_token_type": "input",
    }
    assert tokens == {
        tuple(sorted({**base, "lantern_tenant": "acme"}.items())): 5.0,
        tuple(sorted({**base, "lantern_tenant": "zeta"}.items())): 1.0,
    }
    durations = _samples(out["metrics"], "gen_ai_client_operation_duration_seconds_count")
    failed = {**base, "gen_ai_request_model": DEAD, "error_type": "ProviderUnavailable"}
    del failed["gen_ai_token_type"]
    assert durations[tuple(sorted({**failed, "lantern_tenant": "acme"}.items()))] == 1.0
    assert {dict(k)["gen_ai_operation_name"] for k in durations} == {"embeddings"}
    requests = _samples(out["metrics"], "lantern_requests_total")
    assert requests == {
        (("backend", "fake-embed"), ("model", MODEL), ("status", "ok"), ("tenant", "acme")): 1.0,
        (("backend", "fake-embed"), ("model", MODEL), ("status", "ok"), ("tenant", "zeta")): 1.0,
        (("backend", "dead-embed"), ("model", DEAD), ("status", "error"), ("tenant", "acme")): 1.0,
    }
    cost = _samples(out["metrics"], "lantern_cost_usd_total")
    assert cost[(("model", MODEL), ("tenant", "acme"))] == pytest.approx(5 * 0.02 / 1e6)


def test_broken_telemetry_never_fails_a_served_call(tmp_path: Path) -> None:
    out = asyncio.run(_serve(tmp_path, traced=True, broken=True))
    assert out["statuses"] == [200, 400, 502, 200]  # as with working telemetry
    assert [t for t, _, _ in _ledger_ids(tmp_path)] == ["acme", "acme", "zeta"]


def test_the_dimension_count_is_read_from_floats_or_base64() -> None:
    floats = {"data": [{"embedding": [0.1, 0.2, 0.3, 0.4]}]}
    packed = base64.b64encode(struct.pack("<3f", 1.0, 2.0, 3.0)).decode()
    assert dimension_count(floats) == 4
    assert dimension_count({"data": [{"embedding": packed}]}) == 3
    for unreadable in ({}, {"data": []}, {"data": [{"embedding": "%%%"}]}, {"data": [7]}):
        assert dimension_count(unreadable) is None  # type: ignore[arg-type]


def test_a_client_that_leaves_mid_call_pays_its_input_as_on_the_chat_doors(
    tmp_path: Path,
) -> None:
    """The input reached the upstream before the client left: the row says so
    (`client_disconnect`), carries the input as the gateway counted it, priced, and the quota
    is settled on it; nothing is billed twice."""
    text = "alpha beta gamma delta"

    async def main() -> tuple[str, float]:
        with FakeEmbeddings() as upstream:
            upstream.app.delay_s = 3.0
            app = create_app(_settings(tmp_path, upstream))
            parts = app.state.components
            await parts.start()
            try:
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                    headers = {"authorization": f"Bearer {KEYS['acme']}"}
                    body = {"model": MODEL, "input": text}
                    with pytest.raises(TimeoutError):  # the client hangs up
                        await asyncio.wait_for(
                            client.post("/v1/embeddings", json=body, headers=headers), 0.5
                        )
                    metrics = (await client.get("/metrics")).text
            finally:
                parts.pipeline.after_reply.flush()
                await parts.stop()
        requests = _samples(metrics, "lantern_requests_total")
        return next(dict(k)["status"] for k in requests), sum(requests.values())

    status, calls = asyncio.run(main())
    assert (status, calls) == ("client_disconnect", 1.0)
    engine = create_engine(f"sqlite:///{tmp_path}/lantern.db")
    query = text_("SELECT status, error_kind, input_tokens, cost_usd FROM usage")
    with engine.connect() as conn:
        [row] = conn.execute(query).all()
    engine.dispose()
    counted = TokenCounter().count_text(MODEL, text)
    assert tuple(row[:3]) == ("client_disconnect", None, counted)
    assert float(row[3]) == pytest.approx(counted * 0.02 / 1e6)


def test_a_call_that_names_no_model_is_a_span_that_says_why(tmp_path: Path) -> None:
    """Refused before any model is known: its span is the operation alone, `embeddings`, in the
    client's trace, with no `gen_ai.request.model` and the refusal's `error.type`."""

    async def main() -> tuple[int, list[ReadableSpan]]:
        with FakeEmbeddings() as upstream:
            app = create_app(_settings(tmp_path, upstream))
            parts = app.state.components
            spans = InMemorySpanExporter()
            parts.pipeline.s.telemetry.add_span_processor(SimpleSpanProcessor(spans))
            await parts.start()
            try:
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                    headers = {
                        "authorization": f"Bearer {KEYS['acme']}",
                        "traceparent": TRACEPARENT,
                    }
                    reply = await client.post(
                        "/v1/embeddings", json={"input": "x"}, headers=headers
                    )
            finally:
                parts.pipeline.after_reply.flush()
                await parts.stop()
        return reply.status_code, list(spans.get_finished_spans())

    status, spans = asyncio.run(main())
    assert status == 400
    [span] = spans
    assert (span.name, span.kind) == ("embeddings", SpanKind.SERVER)
    assert _hex(span, parent=True) == PARENT
    assert span.status.status_code is StatusCode.ERROR
    attrs = dict(span.attributes or {})
    assert ga.GEN_AI_REQUEST_MODEL not in attrs and ga.GEN_AI_PROVIDER_NAME not in attrs
    assert attrs[ga.GEN_AI_OPERATION_NAME] == "embeddings"
    assert (attrs["error.type"], attrs["lantern.status"]) == ("RequestRejected", "rejected")
    assert (attrs["lantern.tenant"], attrs["lantern.door"]) == ("acme", "embeddings")
