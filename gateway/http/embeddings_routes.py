"""`POST /v1/embeddings`: parse (a large body in a worker thread), call `gateway.core.embeddings`,
pass the upstream's vectors on. Errors in OpenAI's shape; every rule lives below. The client's
`traceparent` is read only while calls are traced."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.core.embeddings import EmbeddingCall, Embeddings
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.chat_routes import error_response
from gateway.http.heap import HeapTrim
from gateway.http.request_body import BodyLimits, read_object
from gateway.http.trace_context import client_trace


def build_embeddings_router(
    embeddings: Embeddings, keys: KeyLookup, limits: BodyLimits
) -> APIRouter:
    router = APIRouter()
    heap = HeapTrim()

    async def create(http: Request) -> Response:
        num_bytes = 0
        try:
            caller = authenticate(http.headers, keys)
            body, num_bytes = await read_object(http, limits)
            headers = http.headers
            session = headers.get("x-session-id") or headers.get("x-lantern-session")
            trace = client_trace(headers) if embeddings.s.telemetry.is_tracing else None
            call = EmbeddingCall(caller.tenant, caller.key_id, body, session, num_bytes, trace)
            reply = await embeddings.embed(call)
        except Exception as exc:
            refused = error_response(exc, "openai")
            refused.background = heap.after_reply(num_bytes, limits.offload_bytes)
            return refused
        trim = heap.after_reply(num_bytes, limits.offload_bytes)
        return Response(orjson.dumps(dict(reply.body)), 200, None, "application/json", trim)

    router.add_api_route("/v1/embeddings", create, methods=["POST"])
    return router
