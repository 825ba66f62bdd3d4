"""The fake upstream's OpenAI Responses API (`POST /v1/responses`), JSON and SSE.

It answers as `FakeUpstreamApp` answers chat calls (same replies, usage and prompt cache), in
the Responses API's own shapes, and behaves as a reasoning model: every reply starts with a
reasoning item (`rs_fake_N`, with an encrypted payload) and bills `REASONING_TOKENS` of
reasoning inside its output tokens. It keeps nothing: `previous_response_id` or `store: true`
is a 400, so a gateway that forwards natively must expand conversations itself. Its prompt
cache (when the upstream has one) sees the prompt as the chat call it amounts to: tools,
instructions as a system message, then the input. In `today` mode it answers every call with
the reply of tests/fakes/today_responses.py instead, streamed or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from adapters.errors import WireFormatError
from adapters.types import ChatResponse, Usage
from adapters.wire import openai as openai_wire
from adapters.wire.responses import (
    ResponsesStreamEncoder,
    encode_response,
    envelope,
    parse_request,
    to_chat_request,
)
from tests.fakes import today_responses

if TYPE_CHECKING:
    from tests.fakes.upstream import FakeUpstreamApp, Send

REASONING_TOKENS = 7


async def serve_responses(app: FakeUpstreamApp, raw: bytes, send: Send, api_key: str = "") -> None:
    from tests.fakes.asgi_replies import error_body as _error_body
    from tests.fakes.asgi_replies import respond as _respond
    from tests.fakes.reply_plan import stream_events

    try:
        body = orjson.loads(raw)
        req = parse_request(body)
        if req.previous_response_id is not None or body.get("store") is not False:
            raise WireFormatError("store", "this upstream stores nothing: send store=false")
        chat = to_chat_request(req)
    except (orjson.JSONDecodeError, WireFormatError) as exc:
        await _respond(send, 400, _error_body("openai", str(exc), "invalid_request_error"))
        return
    if app.today:  # today's fields, every one (tests/fakes/today_responses.py)
        await _serve_today(req.stream, send)
        return
    answer = app._reply("openai", openai_wire.encode_request(chat), chat, api_key)
    answer = _with_reasoning_tokens(answer)
    response_id = "resp_fake_" + answer.id.removeprefix("chatcmpl-fake-")
    reasoning = _reasoning_item(response_id)
    if not req.stream:
        reply = encode_response(response_id, req, answer, 1_700_000_000)
        reply["output"].insert(0, reasoning)
        reply["usage"]["output_tokens_details"]["reasoning_tokens"] = REASONING_TOKENS
        await _respond(send, 200, orjson.dumps(reply))
        return
    encoder = ResponsesStreamEncoder(envelope(response_id, req, 1_700_000_000))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    for event in stream_events(answer, app.counter):
        data = encoder.encode(event)
        await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _serve_today(stream: bool, send: Send) -> None:
    from tests.fakes.asgi_replies import respond as _respond

    if not stream:
        await _respond(send, 200, orjson.dumps(today_responses.response()))
        return
    head = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    for frame in today_responses.frames():
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _with_reasoning_tokens(answer: ChatResponse) -> ChatResponse:
    usage = answer.usage
    return ChatResponse(
        answer.id,
        answer.model,
        answer.content,
        answer.stop_reason,
        Usage(
            usage.input_tokens,
            usage.output_tokens + REASONING_TOKENS,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
        ),
    )


def _reasoning_item(response_id: str) -> dict[str, Any]:
    return {
        "id": "rs_" + response_id.removeprefix("resp_"),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "thought about it"}],
        "encrypted_content": "opaque-" + response_id,
    }


__all__ = ["REASONING_TOKENS", "serve_responses"]
