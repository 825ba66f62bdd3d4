"""The two front doors: OpenAI `/v1/chat/completions` and Anthropic `/v1/messages`.

Routes parse, call the pipeline, and shape the reply; every rule lives below them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from adapters.backend import RelayedChunk
from adapters.types import ChatRequest, StreamEvent, WireFormat
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.codec import codec_for, reply_body
from gateway.core.pipeline import Admitted, IncomingCall, Pipeline
from gateway.errors import RequestRejected
from gateway.http.api_schema import (
    AnthropicError,
    ChatCompletion,
    ChatCompletionRequest,
    MessagesReply,
    MessagesRequest,
    OpenAIError,
    errors,
    json_body,
)
from gateway.http.auth import Caller, KeyLookup, authenticate
from gateway.http.errors import to_http
from gateway.http.idempotent_doors import HEADER as IDEMPOTENCY_KEY
from gateway.http.idempotent_doors import IdempotentDoors
from gateway.http.request_body import BodyLimits, first_headers, parse_object, read_body
from gateway.http.sse_reply import SSEReply
from gateway.http.trace_context import Unread, client_trace, trace_refusal

log = logging.getLogger("lantern.routes")


def error_response(
    exc: Exception, wire: WireFormat, extra_headers: dict[str, str] | None = None
) -> Response:
    err = to_http(exc, wire)
    if err.status_code == 500:
        log.error("unexpected error serving a call", exc_info=exc)
    headers = {**(extra_headers or {}), **err.headers}
    return Response(orjson.dumps(err.body), err.status_code, headers, "application/json")


def decode_call(
    raw: bytes, wire: WireFormat, limits: BodyLimits, tool_lists: openai_wire.ToolListMemo | None
) -> tuple[dict[str, Any], ChatRequest]:
    """Body and canonical request; pure (`tool_lists` aside), so it may run in a thread."""
    body = parse_object(raw, limits.max_depth, None if tool_lists is None else tool_lists.depth)
    check_num_messages(body, limits)
    return body, codec_for(wire).decode_request(body, tool_lists)


def check_num_messages(body: Mapping[str, Any], limits: BodyLimits) -> None:
    """A 400 (`max_messages`) for more `messages` than the gateway takes in one call."""
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > limits.max_messages:
        raise RequestRejected(
            f"messages: {len(messages)}; the gateway's limit is {limits.max_messages}",
            rule="max_messages",
            field="messages",
        )


class ChatRoutes:
    def __init__(
        self,
        pipeline: Pipeline,
        keys: KeyLookup,
        limits: BodyLimits | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.keys = keys
        self.limits = limits or BodyLimits.from_settings()
        # Starlette's `StreamingResponse` is the reference path (set by tests and benchmarks)
        self.stream_reply: type[SSEReply] | type[StreamingResponse] = SSEReply
        # the agent's tools, decoded once, per wire
        self._tool_lists: dict[WireFormat, openai_wire.ToolListMemo] = {
            "openai": openai_wire.ToolListMemo(),
            "anthropic": openai_wire.ToolListMemo(decode=anthropic_wire.decode_tools),
        }
        self.replay: IdempotentDoors | None = None  # set: `Idempotency-Key` is honoured

    async def serve(self, http: Request, wire: WireFormat) -> Response:
        headers = first_headers(http)
        if self.replay is not None and IDEMPOTENCY_KEY in headers:
            return await self.replay.serve(http, wire, lambda again: self._serve(again, wire))
        return await self._serve(http, wire, headers)

    async def _serve(
        self, http: Request, wire: WireFormat, http_headers: dict[str, str] | None = None
    ) -> Response:
        call = caller = None
        headers = first_headers(http) if http_headers is None else http_headers
        try:
            caller = authenticate(headers, self.keys)
            call = await self._incoming(http, wire, headers, caller)
            admitted = await self.pipeline.admit(call)
        except Exception as exc:  # every rejection becomes the client's own error shape
            return self._refused(exc, wire, headers, caller, call)
        headers = admitted.headers(self.pipeline.s.admission)
        if call.request.stream:
            return await self._stream(admitted, wire, call.body, headers)
        try:
            response = await self.pipeline.complete(admitted)
        except Exception as exc:
            return error_response(exc, wire, headers)
        # the upstream's own body where it spoke this wire; the name the client asked for
        encoded = reply_body(wire, response, call.request.model)
        return Response(orjson.dumps(encoded), 200, headers, "application/json")

    def _refused(
        self,
        exc: Exception,
        wire: WireFormat,
        headers: dict[str, str],
        caller: Caller | None,
        call: IncomingCall | None,
    ) -> Response:
        """The refusal in the client's error shape, and its span while tracing (kept out of
        `_serve`: the path of a call that is served runs none of it)."""
        unread = Unread(caller, headers, codec_for(wire).door)
        trace_refusal(self.pipeline.s, call, exc, unread)
        return error_response(exc, wire)

    async def _incoming(
        self, http: Request, wire: WireFormat, headers: dict[str, str], caller: Caller
    ) -> IncomingCall:
        """`caller`: authenticated before a byte of the body is read; the body read up to the
        limit; a large one parsed and decoded in a worker thread (the loop keeps serving
        others). `headers`: `http`'s (`first_headers`)."""
        raw = await read_body(http, self.limits.max_bytes, headers)
        if len(raw) >= self.limits.offload_bytes:
            body, request = await self.limits.offload.run(
                caller.tenant.tenant, decode_call, raw, wire, self.limits, None
            )
        else:
            body, request = decode_call(raw, wire, self.limits, self._tool_lists[wire])
        session = headers.get("x-session-id") or headers.get("x-lantern-session")
        beta = headers.get("anthropic-beta")
        betas = () if beta is None else tuple(b.strip() for b in beta.split(",") if b.strip())
        tracing = self.pipeline.s.telemetry.is_tracing
        return IncomingCall(
            wire,
            caller.tenant,
            caller.key_id,
            request,
            body,
            session,
            len(raw),
            betas=betas,
            trace=client_trace(headers) if tracing else None,
        )

    async def _stream(
        self, adm: Admitted, wire: WireFormat, body: Mapping[str, Any], headers: dict[str, str]
    ) -> Response:
        encode = codec_for(wire).stream_encoder(body, adm.call.request.model, adm.prompt_tokens)
        events = self.pipeline.stream(adm)
        try:  # the first event decides between an HTTP error and a 200 stream
            first = await events.__anext__()
        except Exception as exc:
            await events.aclose()
            return error_response(exc, wire, headers)
        return self.stream_reply(
            _sse(first, events, encode, wire), 200, headers, media_type="text/event-stream"
        )


async def _sse(
    first: StreamEvent | RelayedChunk,
    rest: AsyncGenerator[StreamEvent | RelayedChunk, None],
    encode: Callable[[StreamEvent], bytes],
    wire: WireFormat,
) -> AsyncIterator[bytes]:
    """The client's bytes: relayed chunks as they are, events encoded."""
    try:
        yield first.data if isinstance(first, RelayedChunk) else encode(first)
        async for item in rest:
            data = item.data if isinstance(item, RelayedChunk) else encode(item)
            if data:
                yield data
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the stream already started: report in-band, as providers do
        err = to_http(exc, wire)
        yield codec_for(wire).error_event(orjson.dumps(err.body))
    finally:
        await rest.aclose()


CHAT_ERRORS = (400, 401, 403, 404, 413, 429, 502, 503, 504)


def build_chat_router(routes: ChatRoutes) -> APIRouter:
    """The doors as FastAPI routes without parameters: the handlers parse their own bodies
    (FastAPI's machinery would only add CPU per call); the bodies are declared for
    `/openapi.json` only. `LanternApp` serves these paths before reaching this router."""
    router = APIRouter()

    async def chat_completions(request: Request) -> Response:
        return await routes.serve(request, "openai")

    async def messages(request: Request) -> Response:
        return await routes.serve(request, "anthropic")

    doors = (
        ("/v1/chat/completions", chat_completions, ChatCompletionRequest, ChatCompletion),
        ("/v1/messages", messages, MessagesRequest, MessagesReply),
    )
    for path, handler, asked, answered in doors:
        error = OpenAIError if answered is ChatCompletion else AnthropicError
        router.add_api_route(
            path,
            handler,
            methods=["POST"],
            openapi_extra=json_body(asked),
            responses={
                200: {"model": answered, "content": {"text/event-stream": {}}},
                **errors(error, *CHAT_ERRORS),
            },
        )
    return router
