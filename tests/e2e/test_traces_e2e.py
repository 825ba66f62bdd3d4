"""Issue 41 as it is shown: `lantern serve` with the OTLP exporter pointed at an in-process
collector; a plain and a streamed chat call, and an embeddings call, each with its own
`traceparent`. Each gateway span descends from the client's span, each upstream request carries
the context of its attempt's span, and the names are the GenAI conventions' own (checked
against the semconv package)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import openai
import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from bench._procs import free_port
from tests.e2e.conftest import models_for
from tests.e2e.harness import stop_processes, wait_healthy, write_config, write_policy
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.otlp_collector import CollectedSpan, OTLPCollector
from tests.fakes.upstream import FakeUpstream

REPO = Path(__file__).resolve().parents[2]
KEY = "lt-acme-traces-key-0001"
SERVER, CLIENT = 2, 3  # OTLP's SpanKind values
EMBED = "text-embedding-3-small"
GEN_AI_NAMES = {v for k, v in vars(ga).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
pytestmark = pytest.mark.slow


class Served(NamedTuple):
    url: str
    upstream: FakeUpstream
    collector: OTLPCollector
    embeddings: FakeEmbeddings


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", KEY, models=["gpt-4o-mini", EMBED])
    with FakeUpstream() as upstream, OTLPCollector() as collector, FakeEmbeddings() as embed:
        embedder = {"kind": "openai_compatible", "name": "fake-embed", "model": "te3"}
        embedder["base_url"] = embed.base_url
        telemetry = {
            "exporter": "otlp",
            "otlp_endpoint": collector.endpoint,
            "service_name": "lantern-traces-test",
        }
        models = [*models_for(upstream)[:1], {"name": EMBED, "backends": [embedder]}]
        config = write_config(tmp_path / "l.yaml", tmp_path, models, telemetry=telemetry)
        port = free_port()
        log = tmp_path / "gw.log"
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*argv, "--port", str(port)], cwd=REPO, env=dict(os.environ), stdout=out, stderr=out
            )
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}", log)
            yield Served(f"http://127.0.0.1:{port}", upstream, collector, embed)
        finally:
            stop_processes([proc])


def _traceparent(n: int) -> tuple[str, str, str]:
    trace_id, span_id = f"{n:032x}", f"{n + 100:016x}"
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _of(spans: list[CollectedSpan], trace_id: str, kind: int) -> CollectedSpan:
    [span] = [s for s in spans if s.trace_id == trace_id and s.kind == kind]
    return span


def test_the_client_trace_continues_through_the_gateway_and_upstream(
    served: Served,
) -> None:
    url, upstream, collector, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    messages = [{"role": "user", "content": "hello words:4"}]
    plain_trace, plain_parent, plain_tp = _traceparent(0xA1)
    client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"traceparent": plain_tp, "x-session-id": "agent-7"},
    )
    stream_trace, stream_parent, stream_tp = _traceparent(0xB2)
    chunks = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"traceparent": stream_tp, "x-session-id": "agent-7"},
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    spans = collector.wait_for(4)
    sent = [r.headers["traceparent"] for r in upstream.requests if "traceparent" in r.headers]
    for trace_id, parent, streamed in ((plain_trace, plain_parent, False), (stream_trace, stream_parent, True)):  # fmt: skip
        server, attempt = _of(spans, trace_id, SERVER), _of(spans, trace_id, CLIENT)
        assert server.parent_span_id == parent
        assert attempt.parent_span_id == server.span_id
        assert f"00-{trace_id}-{attempt.span_id}-01" in sent  # the upstream joined the trace
        assert server.name == attempt.name == "chat gpt-4o-mini"
        assert server.resource["service.name"] == "lantern-traces-test"
        a = server.attributes
        assert a[ga.GEN_AI_OPERATION_NAME] == "chat"
        assert a[ga.GEN_AI_PROVIDER_NAME] == "openai"
        assert a[ga.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
        assert a[ga.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
        assert a[ga.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        assert a[ga.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
        assert a[ga.GEN_AI_USAGE_INPUT_TOKENS] > 0
        assert ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS in a
        assert ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS in a
        assert a[ga.GEN_AI_CONVERSATION_ID] == "agent-7"
        assert (ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in a) is streamed
        assert a["lantern.tenant"] == "acme"
        for span in (server, attempt):  # every gen_ai name is the convention's own
            assert {k for k in span.attributes if k.startswith("gen_ai.")} <= GEN_AI_NAMES
            assert not any("hello" in str(v) for v in span.attributes.values())  # no text
    # the GenAI metrics' exemplars link to the calls' traces (OpenMetrics exposition); a bucket
    # keeps its latest exemplar only, so the plain call's may be overwritten by the stream's
    accept = {"accept": "application/openmetrics-text; version=1.0.0"}
    linked: set[str] = set()
    for _ in range(100):  # the metrics are observed once the reply is out, not before it
        exposition = httpx.get(url + "/metrics", headers=accept).text
        linked = set(re.findall(r'# \{trace_id="([0-9a-f]{32})"\}', exposition))
        if stream_trace in linked:
            break
        time.sleep(0.1)
    assert stream_trace in linked
    assert linked <= {plain_trace, stream_trace}


def test_a_call_refused_at_admission_is_a_span_in_the_client_trace(
    served: Served,
) -> None:
    url, upstream, collector, _ = served
    trace_id, parent, traceparent = _traceparent(0xE5)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}  # not served
    headers = {"authorization": f"Bearer {KEY}", "traceparent": traceparent}
    refused = httpx.post(url + "/v1/chat/completions", json=body, headers=headers)
    assert refused.status_code == 404
    [span] = collector.wait_for(1)
    assert (span.trace_id, span.parent_span_id, span.kind) == (trace_id, parent, SERVER)
    assert span.name == "chat gpt-4o"
    assert span.attributes["error.type"] == "UnknownModel"
    assert (span.attributes["lantern.status"], span.attributes["lantern.tenant"]) == (
        "rejected",
        "acme",
    )
    assert not [r for r in upstream.requests if "traceparent" in r.headers]  # nothing upstream


def test_an_embeddings_call_is_a_span_in_the_client_trace(
    served: Served,
) -> None:
    url, _, collector, embeddings = served
    trace_id, parent, traceparent = _traceparent(0xC3)
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    reply = client.embeddings.create(
        model=EMBED, input=["hello there", "general"], extra_headers={"traceparent": traceparent}
    )
    assert reply.usage.prompt_tokens == 3
    spans = collector.wait_for(2)
    server, attempt = _of(spans, trace_id, SERVER), _of(spans, trace_id, CLIENT)
    assert server.parent_span_id == parent and attempt.parent_span_id == server.span_id
    sent = [r.headers.get("traceparent") for r in embeddings.app.requests]
    assert f"00-{trace_id}-{attempt.span_id}-01" in sent  # the upstream joined the trace
    assert server.name == attempt.name == f"embeddings {EMBED}"
    a = server.attributes
    assert (a[ga.GEN_AI_OPERATION_NAME], a[ga.GEN_AI_PROVIDER_NAME]) == ("embeddings", "openai")
    assert (a[ga.GEN_AI_USAGE_INPUT_TOKENS], a[ga.GEN_AI_EMBEDDINGS_DIMENSION_COUNT]) == (3, 3)
    assert ga.GEN_AI_REQUEST_MAX_TOKENS not in a
    for span in (server, attempt):
        assert {k for k in span.attributes if k.startswith("gen_ai.")} <= GEN_AI_NAMES
        assert not any("hello" in str(v) for v in span.attributes.values())  # no text
