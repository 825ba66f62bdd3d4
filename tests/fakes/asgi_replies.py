"""The fake upstreams' ASGI replies: reading a request body, a JSON reply, each provider's
error body, and the "today" replies (what the providers send now, tests/fakes/today.py) with
the error, broken-stream and malformed-reply markers of tests/fakes/reply_plan.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from tests.fakes import today
from tests.fakes.reply_plan import MALFORMED, MIDSTREAM, STATUS

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def serve_today(wire: str, body: dict[str, Any], text: str, send: Send) -> None:
    """Today's reply; today's error for a `status:NNN` the request asks for, a stream broken
    by the provider's in-band error for `error:midstream`, a reply or stream that breaks the
    wire's shape for `reply:malformed`."""
    asked = STATUS.search(text)
    if asked is not None:
        await respond(send, int(asked.group(1)), *today.error_reply(wire, int(asked.group(1))))
        return
    malformed = MALFORMED in text
    if not body.get("stream"):
        reply = today.malformed_reply(wire) if malformed else today.reply_body(wire)
        await respond(send, 200, orjson.dumps(reply))
        return
    head = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    frames = today.reply_frames(wire, body)
    if MIDSTREAM in text or malformed:
        frames = today.broken_frames(wire) if MIDSTREAM in text else today.malformed_frames(wire)
    for frame in frames:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": body})


def error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")


def error_body(wire: str, message: str, type_: str) -> bytes:
    if wire == "anthropic":
        return anthropic_wire.encode_error(message, type_)
    return openai_wire.encode_error(message, type_)
