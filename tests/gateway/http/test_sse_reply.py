"""The lean SSE reply against Starlette's StreamingResponse (the reference path), through the
real chat door and pipeline: the same bytes and headers, the in-band error mid-stream, and a
client that leaves mid-stream still settles and records exactly once, in both paths."""

from __future__ import annotations

import asyncio
import re
from collections.abc import MutableMapping
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from starlette.responses import StreamingResponse

from adapters.types import Usage
from gateway.http.chat_routes import ChatRoutes, build_chat_router
from policies.model import TenantPolicy
from tests.gateway.core.test_after_reply import Backend, Fakes, build

BODY = orjson.dumps(
    {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hi"}],
    }
)


class Keys:
    def tenant_for_key(self, key: str) -> tuple[TenantPolicy, str] | None:
        return (TenantPolicy(tenant="acme"), "k1") if key == "sk-1" else None


def scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},  # uvicorn's: no send-raises-on-gone
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"authorization", b"Bearer sk-1"), (b"x-session-id", b"s1")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def drive(app: Any, body: bytes, leave_after: int | None) -> list[Any]:
    """One call to `app` at ASGI level, as a client that leaves once `leave_after` body messages
    have arrived (None: it stays to the end); the messages sent, after the after-reply batch."""
    sent: list[Any] = []
    gone = asyncio.Event()
    requested = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        bodies = sum(m["type"] == "http.response.body" for m in sent)
        if bodies == leave_after or not message.get("more_body", True):
            gone.set()

    served = asyncio.ensure_future(app(scope(), receive, send))
    done, _ = await asyncio.wait({served}, timeout=5)
    if not done:  # the reply never noticed the client leave
        served.cancel()
        raise AssertionError("the stream did not end")
    served.result()
    await asyncio.sleep(0)  # the after-reply batch
    return sent


async def serve(backend: Backend, lean: bool, leave_after: int | None) -> tuple[list[Any], Fakes]:
    """One streamed call; the client leaves once `leave_after` body messages have arrived."""
    pipeline, fakes, _ = build(backend)
    app = FastAPI()
    routes = ChatRoutes(pipeline, Keys())
    if not lean:  # the reference path
        routes.stream_reply = StreamingResponse
    app.include_router(build_chat_router(routes))
    return await drive(app, BODY, leave_after), fakes


def _shape(sent: list[Any]) -> list[Any]:
    """The messages with the per-call request id (a uuid) and the chunks' `created` second (the
    two runs may straddle a second) blanked."""
    out = []
    for m in sent:
        if m["type"] == "http.response.start":
            headers = [h for h in m["headers"] if h[0] != b"x-lantern-request-id"]
            out.append((m["status"], headers))
        else:
            body = re.sub(rb'"created":\d+', b'"created":0', m["body"])
            out.append((body, m.get("more_body", False)))
    return out


def _body(sent: list[Any]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent)


@pytest.mark.parametrize("fail", [False, True])
def test_lean_reply_sends_the_reference_bytes(fail: bool) -> None:
    lean, _ = asyncio.run(serve(Backend(fail_after_output=fail), True, None))
    ref, _ = asyncio.run(serve(Backend(fail_after_output=fail), False, None))
    assert _shape(lean) == _shape(ref)
    start = lean[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    frames = [f for f in _body(lean).split(b"\n\n") if f]
    assert all(f.startswith(b"data: ") for f in frames)
    if fail:  # in-band error after the first token, no [DONE]
        assert orjson.loads(frames[-1][6:])["error"]["message"].endswith("connection reset")
    else:
        usage = orjson.loads(frames[-2][6:])
        assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] == 7
        assert usage["usage"]["completion_tokens"] == 3 and frames[-1] == b"data: [DONE]"


@pytest.mark.parametrize("lean", [True, False])
def test_client_leaving_mid_stream_settles_and_records_once(lean: bool) -> None:
    sent, fakes = asyncio.run(serve(Backend(hang=True), lean, 2))
    assert [m["more_body"] for m in sent[1:]] == [True, True]  # role chunk, "hi"; then gone
    assert fakes.settled == [Usage(input_tokens=7, output_tokens=1)]
    assert [(r.status, r.usage) for r in fakes.rows] == [("client_disconnect", fakes.settled[0])]
    assert fakes.completed == [False]


def test_cancel_from_outside_still_propagates() -> None:
    async def main() -> None:
        task = asyncio.create_task(serve(Backend(hang=True), True, None))
        await asyncio.sleep(0.05)
        task.cancel()  # server shutdown, not the client leaving
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
