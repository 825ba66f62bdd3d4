"""The model doors' `Idempotency-Key` hook: authenticates, reads the body once, names the
record (tenant, API key id, key) and the request (its canonical body), and lets
`gateway.replay` run, join or replay it; turns the reply into Starlette responses and back.
Requests without the header never come here."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from adapters.types import WireFormat
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.errors import to_http
from gateway.http.request_body import BodyLimits, read_body
from gateway.http.sse_reply import SSEReply
from gateway.replay.records import ReplyHead, parse_key, record_scope, request_fingerprint
from gateway.replay.service import Produced, ReplayService, Served

HEADER = "idempotency-key"  # also what an SDK sends when told to (`_idempotency_header`)
Handler = Callable[[Request], Awaitable[Response]]


class IdempotentDoors:
    def __init__(self, service: ReplayService, keys: KeyLookup, limits: BodyLimits) -> None:
        self.service = service
        self.keys = keys
        self.limits = limits

    async def serve(self, http: Request, wire: WireFormat, handler: Handler) -> Response:
        """`handler` serves the request as without a key (it reads the body again)."""
        try:
            caller = authenticate(http.headers, self.keys)
            key = parse_key(http.headers[HEADER])
            raw = await read_body(http, self.limits.max_bytes)
            scope = record_scope(caller.tenant.tenant, caller.key_id, key)
            fingerprint = request_fingerprint(http.scope["path"], raw)
            request = _with_body(http, raw)
            served = await self.service.serve(
                scope, fingerprint, lambda: _produce(handler, request)
            )
        except Exception as exc:
            err = to_http(exc, wire)
            return Response(
                orjson.dumps(err.body), err.status_code, err.headers, "application/json"
            )
        return await _reply(served)


async def _produce(handler: Handler, request: Request) -> Produced:
    response = await handler(request)
    headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers)
    head = ReplyHead(response.status_code, headers)
    if isinstance(response, StreamingResponse):
        chunks = _as_bytes(response.body_iterator)
    else:
        chunks = _one(bytes(response.body))
    return Produced(head, chunks, is_kept=response.status_code == 200)


async def _reply(served: Served) -> Response:
    head = served.head
    headers = dict(head.headers)
    if served.is_replayed:
        headers["idempotent-replayed"] = "true"
    if head.is_stream:
        return SSEReply(served.chunks, head.status, headers)
    body = b"".join([chunk async for chunk in served.chunks])
    return Response(body, head.status, headers)


def _with_body(http: Request, raw: bytes) -> Request:
    """The request again, its body already read: the handler reads it from here."""
    is_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal is_sent
        if not is_sent:
            is_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return dict(await http.receive())

    return Request(http.scope, receive)


async def _as_bytes(chunks: AsyncIterable[str | bytes | memoryview]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        if isinstance(chunk, bytes):
            yield chunk
        else:
            yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)


async def _one(body: bytes) -> AsyncIterator[bytes]:
    yield body
