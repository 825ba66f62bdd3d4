"""`POST /v1/embeddings`: parse, call `gateway.core.embeddings`, pass the upstream's vectors on.
Errors in OpenAI's shape; every rule lives below."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.core.embeddings import EmbeddingCall, Embeddings
from gateway.http.auth import KeyLookup, authenticate
from gateway.http.chat_routes import error_response
from gateway.http.request_body import BodyLimits, parse_object, read_body


def build_embeddings_router(
    embeddings: Embeddings, keys: KeyLookup, limits: BodyLimits
) -> APIRouter:
    router = APIRouter()

    async def create(http: Request) -> Response:
        try:
            caller = authenticate(http.headers, keys)
            body = parse_object(await read_body(http, limits.max_bytes), limits.max_depth)
            reply = await embeddings.embed(EmbeddingCall(caller.tenant, caller.key_id, body))
        except Exception as exc:
            return error_response(exc, "openai")
        return Response(orjson.dumps(dict(reply.body)), 200, media_type="application/json")

    router.add_api_route("/v1/embeddings", create, methods=["POST"])
    return router
