"""Quotas as clients see them, through a real gateway and the official SDKs: 429 bodies in the
OpenAI and Anthropic formats, Retry-After and x-ratelimit-* headers, 400 for a call that can never
fit, and a client that goes away mid-stream is charged what was produced, not the reservation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from sqlalchemy import create_engine, text

from quotas.limits import Limits
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

KEY = "lt-quota-http-key-0001"
TPM = 1000


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[RunningGateway, FakeUpstream]]:
    (tmp_path / "policies").mkdir()
    write_policy(
        tmp_path / "policies",
        "quota",
        KEY,
        models=["gpt-4o-mini", "claude-sonnet-4-5"],
        limits={"tokens_per_minute": TPM, "requests_per_minute": 50},
    )
    with FakeUpstream() as upstream:
        backends = [
            ("gpt-4o-mini", "openai_compatible", "fake-openai", upstream.openai_base_url),
            ("claude-sonnet-4-5", "anthropic", "fake-anthropic", upstream.base_url),
        ]
        models = [
            {
                "name": name,
                "backends": [
                    {"kind": kind, "name": backend, "base_url": url, "model": name, "timeout_s": 10}
                    | ({"api_key_env": None} if kind == "anthropic" else {})
                ],
            }
            for name, kind, backend, url in backends
        ]
        running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models))
        try:
            yield running, upstream
        finally:
            running.stop()


def used_tokens(gw: RunningGateway) -> tuple[int, int]:
    """(tokens in the window, calls in flight) as the gateway's own quota store sees them.

    The gateway runs the in-process store; it does no I/O, and the tests look only while no
    call is in flight, so reading it from this thread is safe."""
    store = gw.components.pipeline.s.admission.store
    now_ms = int(time.time() * 1000)
    usage = asyncio.run(store.usage("quota", Limits(tokens_per_minute=TPM), now_ms=now_ms))
    return usage.tokens_used, usage.concurrent


def test_rejections_in_both_formats(gateway: tuple[RunningGateway, FakeUpstream]) -> None:
    gw, _ = gateway
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=KEY, max_retries=0)
    messages = [{"role": "user", "content": "count the foxes"}]
    first = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini",
        messages=messages,
        max_tokens=500,  # type: ignore[arg-type]
    )
    reply = first.parse()
    assert reply.usage is not None
    prompt, used = reply.usage.prompt_tokens, reply.usage.total_tokens
    assert first.headers["x-ratelimit-limit-tokens"] == str(TPM)
    assert first.headers["x-ratelimit-remaining-tokens"] == str(TPM - prompt - 500)
    assert first.headers["x-ratelimit-limit-requests"] == "50"
    assert first.headers["x-ratelimit-remaining-requests"] == "49"
    assert first.headers["x-ratelimit-reset-tokens"] == "1m0s"
    assert used_tokens(gw) == (used, 0)  # settled to the usage reported, slot released

    too_much = TPM - used + 1 - prompt  # max_tokens that makes the reservation not fit by 1
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            max_tokens=too_much,  # type: ignore[arg-type]
        )
    retry = int(limited.value.response.headers["retry-after"])
    assert 1 <= retry <= 60
    assert limited.value.body == {
        "message": f"rate limit exceeded: tokens_per_minute is {TPM}, current use {used}; "
        f"retry after {retry:.1f}s",
        "type": "rate_limit_exceeded",
        "param": None,
        "code": "tokens_per_minute",
    }

    claude = anthropic.Anthropic(base_url=gw.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as anthropic_limited:
        claude.messages.create(
            model="claude-sonnet-4-5",
            messages=messages,
            max_tokens=too_much,  # type: ignore[arg-type]
        )
    body = anthropic_limited.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["message"].startswith(
        f"rate limit exceeded: tokens_per_minute is {TPM}, current use {used}; retry after "
    )

    with pytest.raises(openai.BadRequestError) as never:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            max_tokens=TPM,  # type: ignore[arg-type]
        )
    assert never.value.body == {
        "message": f"request can never fit: tokens_per_minute is {TPM}, "
        f"this call needs {prompt + TPM}",
        "type": "invalid_request_error",
        "param": None,
        "code": "tokens_per_minute",
    }
    assert used_tokens(gw) == (used, 0)  # rejections hold nothing


def test_client_gone_mid_stream_is_charged_what_was_produced(
    gateway: tuple[RunningGateway, FakeUpstream],
) -> None:
    gw, upstream = gateway
    upstream.app.chunk_delay_s = 0.05
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "words:400 tell a long story"}],
        "max_tokens": 400,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, headers=headers) as reply:
        assert reply.status_code == 200
        chunks = 0
        for line in reply.iter_lines():
            chunks += line.startswith("data: ")
            if chunks == 5:
                break  # the client goes away: the connection closes with the stream unfinished
    deadline = time.monotonic() + 20
    while used_tokens(gw)[1] != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    tokens, in_flight = used_tokens(gw)
    assert in_flight == 0  # the slot came back without waiting for the lease
    engine = create_engine(gw.settings.database_url)
    deadline = time.monotonic() + 10
    rows: list[tuple[int, int, str]] = []
    while not rows and time.monotonic() < deadline:
        with engine.connect() as conn:
            rows = [
                tuple(r)
                for r in conn.execute(text("SELECT input_tokens, output_tokens, status FROM usage"))
            ]
        time.sleep(0.1)
    engine.dispose()
    assert len(rows) == 1
    input_tokens, output_tokens, _ = rows[0]
    # charged what the ledger records as produced, far below the 400-token reservation
    assert tokens == input_tokens + output_tokens
    assert 1 <= output_tokens < 400
