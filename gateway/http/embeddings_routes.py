"""`POST /v1/embeddings`: parse (a large body in a worker thread), call `gateway.core.embeddings`,
pass the upstream's vectors on. Errors in OpenAI's shape; every rule lives below. The client's
`traceparent` is read only while calls are traced; a body refused before it became a call is
traced here, every later refusal below."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.core.embedding_telemetry import DOOR
from gateway.core.embeddings import EmbeddingCall, Embeddings
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.chat_routes import error_response
from gateway.http.heap import HeapTrim
from gateway.http.request_body import BodyLimits, read_object
from gateway.http.trace_context import Unread, client_trace, trace_refusal
from gateway.telemetry.genai import EMBEDDINGS


def build_embeddings_router(
    embeddings: Embeddings, keys: KeyLookup, limits: BodyLimits
) -> APIRouter:
    router = APIRouter()
    heap = HeapTrim()

    async def create(http: Request) -> Response:
        num_bytes, caller, call, headers = 0, None, None, http.headers
        telemetry = embeddings.s.telemetry
        try:
            caller = authenticate(headers, keys)
            body, num_bytes = await read_object(http, limits, caller.tenant.tenant)
            session = headers.get("x-session-id") or headers.get("x-lantern-session")
            trace = client_trace(headers) if telemetry.is_tracing else None
            call = EmbeddingCall(caller.tenant, caller.key_id, body, session, num_bytes, trace)
            reply = await embeddings.embed(call)
        except Exception as exc:
            if call is None:  # refused before the call began its own telemetry
                trace_refusal(embeddings.s, None, exc, Unread(caller, headers, DOOR, EMBEDDINGS))
            refused = error_response(exc, "openai")
            refused.background = heap.after_reply(num_bytes, limits.offload_bytes)
            return refused
        trim = heap.after_reply(num_bytes, limits.offload_bytes)
        return Response(orjson.dumps(dict(reply.body)), 200, None, "application/json", trim)

    router.add_api_route("/v1/embeddings", create, methods=["POST"])
    return router
