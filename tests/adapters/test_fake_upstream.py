"""The fake upstream itself: deterministic replies, tool calls only when offered, failure
injection by count, request recording, and the standalone `python -m` mode."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from tests.fakes.upstream import FakeUpstream


def _post(up: FakeUpstream, body: dict) -> httpx.Response:
    return httpx.post(f"{up.openai_base_url}/chat/completions", json=body, timeout=10)


def test_tool_call_only_when_the_tool_is_offered(upstream: FakeUpstream) -> None:
    ask = {"model": "gpt-4o", "messages": [{"role": "user", "content": "call:lookup"}]}
    plain = _post(upstream, ask).json()
    assert (
        plain["choices"][0]["message"]["content"] == "The quick brown fox jumps over the lazy dog"
    )
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    called = _post(upstream, dict(ask, tools=[tool])).json()["choices"][0]
    assert called["finish_reason"] == "tool_calls"
    assert called["message"]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"text":"call:lookup"}',
    }
    answered = dict(
        ask,
        tools=[tool],
        messages=[
            *ask["messages"],
            {"role": "assistant", "content": None, "tool_calls": called["message"]["tool_calls"]},
            {"role": "tool", "tool_call_id": "call_fake_000002", "content": "42"},
        ],
    )
    assert _post(upstream, answered).json()["choices"][0]["finish_reason"] == "stop"


def test_words_directive_max_tokens_and_stop(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "words:12"}]}
    reply = _post(upstream, body).json()
    assert reply["choices"][0]["message"]["content"] == (
        "The quick brown fox jumps over the lazy dog The quick brown"
    )
    assert reply["usage"]["completion_tokens"] == 12
    short = _post(upstream, dict(body, max_completion_tokens=2)).json()
    assert (short["choices"][0]["message"]["content"], short["choices"][0]["finish_reason"]) == (
        "The quick",
        "length",
    )
    stopped = _post(upstream, dict(body, stop=" fox")).json()
    assert stopped["choices"][0]["message"]["content"] == "The quick brown"


def test_failures_by_count_and_recording(upstream: FakeUpstream) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    upstream.fail_next(status=500, count=2)
    assert [_post(upstream, body).status_code for _ in range(3)] == [500, 500, 200]
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"] * 3
    assert upstream.requests[2].json() == body
    bad = httpx.post(f"{upstream.base_url}/v1/messages", content=b"{not json", timeout=10)
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"


def test_runs_standalone_as_a_module() -> None:
    with FakeUpstream() as probe:  # borrow a free port, then release it
        port = probe.port
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.upstream", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = {"model": "claude", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}
        reply = None
        for _ in range(300):
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        assert reply is not None and reply.json()["content"] == [
            {"type": "text", "text": "The quick brown"}
        ]
    finally:
        proc.terminate()
        proc.wait(10)
