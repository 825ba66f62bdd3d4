"""The OpenAI Responses door: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`,
`GET /v1/responses/{id}/input_items`.

Routes parse, call the pipeline (as a chat call, translated), and shape the Responses reply;
conversations are kept by `gateway/responses/`, errors are OpenAI's shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from adapters.backend import RelayedChunk
from adapters.sse import SSEParser
from adapters.types import ChatRequest, StreamEvent
from adapters.wire.responses import (
    ResponsesRequest,
    ResponsesStreamEncoder,
    encode_response,
    envelope,
)
from adapters.wire.responses.request import MAX_RESPONSE_ID_CHARS
from gateway.core.admission import limits_from_policy, reserved_tokens
from gateway.core.calls import IncomingCall, max_tokens_for, route_for
from gateway.core.pipeline import Admitted, Pipeline
from gateway.http.api_schema import OpenAIError, errors, json_body
from gateway.http.auth import Caller, KeyLookup, authenticate
from gateway.http.chat_routes import error_response
from gateway.http.errors import to_http
from gateway.http.idempotent_doors import HEADER as IDEMPOTENCY_KEY
from gateway.http.idempotent_doors import IdempotentDoors
from gateway.http.request_body import BodyLimits, parse_object, read_body
from gateway.http.responses_schema import ResponseItemList, ResponseObject, ResponsesCreateRequest
from gateway.http.sse_reply import SSEReply
from gateway.http.trace_context import (
    Unread,
    operation_trace,
    trace_refusal,
    with_client_trace,
)
from gateway.responses.input_items import parse_query
from gateway.responses.store_writes import StoreWrites
from gateway.responses.turns import (
    DOOR,
    Turn,
    Turns,
    check_reply_query,
    decode_request,
    door_error,
    native_reply,
)
from gateway.telemetry import OperationTrace
from gateway.telemetry.operations import (
    DELETE_RESPONSE,
    FETCH_RESPONSE,
    LIST_INPUT_ITEMS,
    stored_response,
)
from policies.model import TenantPolicy
from quotas.errors import check_never_fits
from quotas.limits import Ask

Items = StreamEvent | RelayedChunk


class ResponsesRoutes:
    def __init__(
        self, pipeline: Pipeline, policies: KeyLookup, turns: Turns, limits: BodyLimits
    ) -> None:
        self.pipeline = pipeline
        self.policies = policies
        self.turns = turns
        self.limits = limits
        self.writes = StoreWrites()  # a streamed turn's store write, past a client that left
        self.replay: IdempotentDoors | None = None  # set: `Idempotency-Key` is honoured

    async def create(self, http: Request) -> Response:
        if self.replay is not None and IDEMPOTENCY_KEY in http.headers:
            return await self.replay.serve(http, "openai", self._create)
        return await self._create(http)

    async def _create(self, http: Request) -> Response:
        call = caller = asked = None
        try:
            caller = authenticate(http.headers, self.policies)
            body, asked, num_bytes = await self._read(http, caller)
            turn = await self._turn(http, caller, body, asked, num_bytes)
            call = with_client_trace(turn.call, http.headers, self.pipeline.s.telemetry)
            admitted = await self.pipeline.admit(call)
        except Exception as exc:  # every rejection in OpenAI's error shape
            self._trace_refusal(exc, http, caller, call, asked)
            return error_response(door_error(exc), "openai")
        headers = admitted.headers(self.pipeline.s.admission)
        if turn.request.stream:
            return await self._stream(turn, admitted, headers)
        try:
            answer = await self.pipeline.complete(admitted)
        except Exception as exc:
            return error_response(door_error(exc), "openai", headers)
        if answer.native is not None:
            reply = native_reply(turn, answer.native)
        else:
            reply = encode_response(turn.response_id, turn.request, answer, turn.created_at)
        await self.turns.remember(turn, reply, self.limits.offload)
        return Response(orjson.dumps(reply), 200, headers, "application/json")

    async def retrieve(self, http: Request, response_id: str) -> Response:
        trace = None
        try:
            caller = authenticate(http.headers, self.policies)
            trace = self._trace(http, caller)
            check_reply_query(http.query_params)
            found = await self.turns.reply(caller.tenant.tenant, response_id)
        except Exception as exc:
            _ended(trace, FETCH_RESPONSE, response_id, None, exc)
            return error_response(exc, "openai")
        _ended(trace, FETCH_RESPONSE, response_id, found)
        return Response(found, 200, media_type="application/json")  # as stored, unparsed

    async def input_items(self, http: Request, response_id: str) -> Response:
        trace = None
        try:
            caller = authenticate(http.headers, self.policies)
            trace = self._trace(http, caller)
            query = parse_query(http.query_params)
            tenant = caller.tenant.tenant
            page = await self.turns.input_items(tenant, response_id, query, self.limits.offload)
        except Exception as exc:
            _ended(trace, LIST_INPUT_ITEMS, response_id, None, exc)
            return error_response(exc, "openai")
        _ended(trace, LIST_INPUT_ITEMS, response_id)
        return Response(orjson.dumps(page), 200, media_type="application/json")

    async def delete(self, http: Request, response_id: str) -> Response:
        trace = None
        try:
            caller = authenticate(http.headers, self.policies)
            trace = self._trace(http, caller)
            await self.turns.forget(caller.tenant.tenant, response_id)
        except Exception as exc:
            _ended(trace, DELETE_RESPONSE, response_id, None, exc)
            return error_response(exc, "openai")
        _ended(trace, DELETE_RESPONSE, response_id)
        body = {"id": response_id, "object": "response.deleted", "deleted": True}
        return Response(orjson.dumps(body), 200, media_type="application/json")

    def _trace(self, http: Request, caller: Caller) -> OperationTrace | None:
        return operation_trace(self.pipeline.s.telemetry, http.headers, caller.tenant.tenant, DOOR)

    async def _read(
        self, http: Request, caller: Caller
    ) -> tuple[dict[str, Any], ResponsesRequest, int]:
        """The body (read once its sender is authenticated), its request and its size; a large
        body decoded in one of the caller's tenant's worker threads."""
        raw = await read_body(http, self.limits.max_bytes)
        if len(raw) >= self.limits.offload_bytes:
            body, request = await self.limits.offload.run(caller.tenant.tenant, self._decode, raw)
        else:
            body, request = self._decode(raw)
        return body, request, len(raw)

    async def _turn(
        self,
        http: Request,
        caller: Caller,
        body: dict[str, Any],
        request: ResponsesRequest,
        num_bytes: int,
    ) -> Turn:
        if request.previous_response_id is not None:
            self._check_policy(caller.tenant, caller.key_id, request)
        session = http.headers.get("x-session-id")
        return await self.turns.begin(
            caller.tenant, caller.key_id, body, request, session, num_bytes, self.limits.offload
        )

    def _trace_refusal(
        self,
        exc: Exception,
        http: Request,
        caller: Caller | None,
        call: IncomingCall | None,
        asked: ResponsesRequest | None,
    ) -> None:
        """The refusal's span, while tracing: one refused after its body was read (its
        `previous_response_id` unknown, its model or output cap not the tenant's) is named by
        the model it asked for, as a chat call refused at admission is."""
        telemetry = self.pipeline.s.telemetry
        if call is None and asked is not None and caller is not None and telemetry.is_tracing:
            chat = ChatRequest(
                asked.model, (), max_tokens=asked.max_output_tokens, stream=asked.stream
            )
            probe = IncomingCall("openai", caller.tenant, caller.key_id, chat, {}, door=DOOR)
            call = with_client_trace(probe, http.headers, telemetry)
        trace_refusal(self.pipeline.s, call, exc, Unread(caller, http.headers, DOOR))

    def _check_policy(self, tenant: TenantPolicy, key_id: str, request: ResponsesRequest) -> None:
        """The tenant's refusals that need no stored conversation (its model, its output cap, a
        token quota that the output alone never fits), made before a continuation's
        conversation is read: a refused tenant costs the gateway nothing of it. The pipeline
        makes the same checks again on the whole call."""
        chat = ChatRequest(request.model, (), max_tokens=request.max_output_tokens)
        probe = IncomingCall("openai", tenant, key_id, chat, {})
        route_for(self.pipeline.s.models, probe)
        output = reserved_tokens(0, max_tokens_for(probe), tenant.limits.token_weights)
        check_never_fits(limits_from_policy(tenant.limits), Ask(output))

    def _decode(self, raw: bytes) -> tuple[dict[str, Any], ResponsesRequest]:
        body = parse_object(raw, self.limits.max_depth)
        return body, decode_request(body, self.turns.max_items)

    async def _stream(self, turn: Turn, adm: Admitted, headers: dict[str, str]) -> Response:
        base = envelope(turn.response_id, turn.request, turn.created_at)
        encoder = ResponsesStreamEncoder(base)
        events = self.pipeline.stream(adm)
        try:  # the first event decides between an HTTP error and a 200 stream
            first = await events.__anext__()
        except Exception as exc:
            await events.aclose()
            return error_response(door_error(exc), "openai", headers)
        body = self._sse(turn, first, events, encoder)
        return SSEReply(body, 200, headers, media_type="text/event-stream")

    async def _sse(
        self,
        turn: Turn,
        first: Items,
        rest: AsyncGenerator[Items, None],
        encoder: ResponsesStreamEncoder,
    ) -> AsyncIterator[bytes]:
        """The client's events; the turn is stored once the model is done, before the client
        is sent the event that says so (it may continue from it, or hang up, at once)."""
        native = NativeFinal()
        try:
            yield await self._event(turn, first, encoder, native)
            async for item in rest:
                yield await self._event(turn, item, encoder, native)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream already started: report in-band
            error = to_http(door_error(exc), "openai").body["error"]
            assert isinstance(error, dict)
            yield encoder.error(error.get("code"), str(error.get("message")), error.get("param"))
        finally:
            await rest.aclose()

    async def _event(
        self, turn: Turn, item: Items, encoder: ResponsesStreamEncoder, native: NativeFinal
    ) -> bytes:
        """`item`'s bytes for the client; when they finish the response, the turn is stored
        first, in a write that a client hanging up meanwhile does not cancel (it was billed,
        and holds the response's id since `response.created`)."""
        was_done = (encoder.final or native.response) is not None
        data = _encoded(item, encoder.encode, native)
        final = encoder.final or native.response
        if final is not None and not was_done:
            write = self.turns.remember(turn, final, self.limits.offload)
            await self.writes.run(turn.call.tenant.tenant, turn.response_id, write)
        return data


def _ended(
    trace: OperationTrace | None,
    operation: str,
    response_id: str,
    reply: Mapping[str, Any] | bytes | None = None,
    exc: Exception | None = None,
) -> None:
    """A stored response's read or deletion, on its span (traced calls only); an id past the
    door's limit is refused, not recorded. A reply read as stored is parsed for its model only
    here, where a span is recorded."""
    if trace is None:
        return
    read = orjson.loads(reply) if isinstance(reply, bytes) else reply
    named = response_id if len(response_id) <= MAX_RESPONSE_ID_CHARS else None
    trace.end(stored_response(operation, named, read, None if exc is None else type(exc).__name__))


class NativeFinal:
    """The finished response in a natively forwarded stream (its `response.completed`)."""

    def __init__(self) -> None:
        self._parser = SSEParser()
        self.response: dict[str, Any] | None = None

    def see(self, data: bytes) -> bytes:
        for event in self._parser.feed(data):
            if event.event in ("response.completed", "response.incomplete"):
                self.response = orjson.loads(event.data)["response"]
        return data


def _encoded(item: Items, encode: Callable[[StreamEvent], bytes], native: NativeFinal) -> bytes:
    """Events as Responses events; a relayed chat chunk by the events it carries; a natively
    forwarded chunk as it came."""
    if isinstance(item, RelayedChunk):
        if item.format == "responses":
            return native.see(item.data)
        return b"".join(encode(event) for event in item.events)
    return encode(item)


RESPONSES_ERRORS = (400, 401, 403, 404, 413, 429, 502, 503, 504)
# `input_items`' query, as OpenAI's document declares it (the handler reads it: `parse_query`)
ITEM_QUERY = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 20}},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
    {"name": "after", "in": "query", "schema": {"type": "string"}},
    {"name": "include", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
]
# `GET /v1/responses/{id}`'s query, as OpenAI's document declares it (`check_reply_query`)
REPLY_QUERY = [
    ITEM_QUERY[-1],
    {"name": "stream", "in": "query", "schema": {"type": "boolean", "enum": [False]}},
    {"name": "starting_after", "in": "query", "schema": {"type": "integer"}},
    {"name": "include_obfuscation", "in": "query", "schema": {"type": "boolean"}},
]


def build_responses_router(routes: ResponsesRoutes) -> APIRouter:
    """The door's four routes; the handlers parse their own bodies, like the chat doors."""
    router = APIRouter()

    async def create(request: Request) -> Response:
        return await routes.create(request)

    async def retrieve(request: Request, response_id: str) -> Response:
        return await routes.retrieve(request, response_id)

    async def delete(request: Request, response_id: str) -> Response:
        return await routes.delete(request, response_id)

    async def input_items(request: Request, response_id: str) -> Response:
        return await routes.input_items(request, response_id)

    answered: dict[int | str, dict[str, Any]] = {
        200: {"model": ResponseObject, "content": {"text/event-stream": {}}}
    }
    router.add_api_route(
        "/v1/responses",
        create,
        methods=["POST"],
        openapi_extra=json_body(ResponsesCreateRequest),
        responses={**answered, **errors(OpenAIError, *RESPONSES_ERRORS)},
    )
    found: dict[int | str, dict[str, Any]] = {
        200: {"model": ResponseObject},
        **errors(OpenAIError, 400, 401, 404, 503),
    }
    router.add_api_route(
        "/v1/responses/{response_id}",
        retrieve,
        methods=["GET"],
        openapi_extra={"parameters": REPLY_QUERY},
        responses=found,
    )
    router.add_api_route("/v1/responses/{response_id}", delete, methods=["DELETE"], responses=found)
    listed: dict[int | str, dict[str, Any]] = {
        200: {"model": ResponseItemList},
        **errors(OpenAIError, 400, 401, 404, 503),
    }
    router.add_api_route(
        "/v1/responses/{response_id}/input_items",
        input_items,
        methods=["GET"],
        openapi_extra={"parameters": ITEM_QUERY},
        responses=listed,
    )
    return router
