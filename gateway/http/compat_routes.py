"""The API surface clients probe around the two chat doors: `/v1/messages/count_tokens`,
`/v1/models/{id}`, the legacy `/v1/completions` and `/v1/embeddings` answers, and the 404 of an
unknown path, each in its client's own error shape. No rule lives here: counting and routing
come from the pipeline's parts.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from adapters.types import ChatRequest, WireFormat
from adapters.wire import anthropic as anthropic_wire
from gateway.core.calls import IncomingCall
from gateway.core.pipeline import Pipeline
from gateway.core.prompt_count import PromptCount, PromptCounting
from gateway.errors import EndpointNotServed, UnknownModel
from gateway.http.auth import Caller, KeyLookup, authenticate
from gateway.http.chat_routes import check_num_messages, error_response
from gateway.http.error_shapes import error_body
from gateway.http.heap import HeapTrim
from gateway.http.request_body import BodyLimits, parse_object, read_body
from gateway.http.trace_context import operation_trace, serving_provider
from gateway.telemetry import Operation, operations

COUNT_DOOR = "messages.count_tokens"  # `lantern.door` of its span
COUNT_HEADER = "x-lantern-token-count"  # `exact` (the provider counted) or `estimate` (we did)


def client_betas(http: Request) -> tuple[str, ...]:
    raw = http.headers.get("anthropic-beta", "")
    return tuple(b.strip() for b in raw.split(",") if b.strip())


def session_header(http: Request) -> str | None:
    return http.headers.get("x-session-id") or http.headers.get("x-lantern-session")


def decode_count(raw: bytes, limits: BodyLimits) -> tuple[dict[str, Any], ChatRequest]:
    """Body and canonical request of a `count_tokens` call; pure, so it may run in a thread.
    The gateway's limits are those of the call it counts."""
    body = parse_object(raw, limits.max_depth)
    check_num_messages(body, limits)
    return body, anthropic_wire.decode_request(body, require_max_tokens=False)


class CompatRoutes:
    def __init__(self, pipeline: Pipeline, keys: KeyLookup, limits: BodyLimits) -> None:
        self.pipeline = pipeline
        self.keys = keys
        self.limits = limits
        self.counting = PromptCounting(pipeline.s)
        self.heap = HeapTrim()

    async def count_tokens(self, http: Request) -> Response:
        """Anthropic's `count_tokens`: what the call would be billed, from the provider where
        the model's first backend counts, else the gateway's; `x-lantern-token-count` says
        which. Authenticated before the body is read; a large body decoded in a thread."""
        trace, call = None, None
        try:
            caller = authenticate(http.headers, self.keys)
            telemetry = self.pipeline.s.telemetry
            trace = operation_trace(telemetry, http.headers, caller.tenant.tenant, COUNT_DOOR)
            call = await self._count_call(http, caller)
            counted = await self.counting.count(call, trace)
        except Exception as exc:
            if trace is not None:
                trace.end(self._counted(call, None, type(exc).__name__))
            return error_response(exc, "anthropic")
        if trace is not None:
            trace.end(self._counted(call, counted))
        reply = orjson.dumps({"input_tokens": counted.input_tokens})
        how = "exact" if counted.is_exact else "estimate"
        trim = self.heap.after_reply(call.body_bytes, self.limits.offload_bytes)
        return Response(reply, 200, {COUNT_HEADER: how}, "application/json", trim)

    async def _count_call(self, http: Request, caller: Caller) -> IncomingCall:
        raw = await read_body(http, self.limits.max_bytes)
        if len(raw) >= self.limits.offload_bytes:
            offload = self.limits.offload
            body, request = await offload.run(caller.tenant.tenant, decode_count, raw, self.limits)
        else:
            body, request = decode_count(raw, self.limits)
        return IncomingCall(
            "anthropic",
            caller.tenant,
            caller.key_id,
            request,
            body,
            session_header(http),
            len(raw),
            betas=client_betas(http),
        )  # the bytes go when this returns, not when the count is done

    def _counted(
        self, call: IncomingCall | None, count: PromptCount | None, error_type: str | None = None
    ) -> Operation:
        """The span's account of a count (traced calls only): the model asked for and the
        provider of the backend that would serve it, when the call got that far."""
        if call is None:
            return operations.counted(None, None, None, None, error_type)
        model = call.request.model
        provider = serving_provider(self.pipeline.s.models, call)
        if count is None:
            return operations.counted(model, provider, None, None, error_type)
        return operations.counted(model, provider, count.input_tokens, count.is_exact)

    async def model(self, http: Request, model_id: str) -> Response:
        """One model, as `/v1/models` lists it (Anthropic's shape for an Anthropic client)."""
        wire: WireFormat = "anthropic" if "anthropic-version" in http.headers else "openai"
        try:
            caller = authenticate(http.headers, self.keys)
            allowed = caller.tenant.models
            if self.pipeline.s.models.get(model_id) is None or (
                allowed and model_id not in allowed
            ):
                raise UnknownModel(model_id)
        except Exception as exc:
            return error_response(exc, wire)
        card: dict[str, str | int]
        if wire == "anthropic":
            card = {"type": "model", "id": model_id, "display_name": model_id}
            card["created_at"] = "1970-01-01T00:00:00Z"
        else:
            card = {"id": model_id, "object": "model", "created": 0, "owned_by": "lantern"}
        return Response(orjson.dumps(card), 200, media_type="application/json")

    async def not_served(self, http: Request) -> Response:
        """`/v1/completions` (legacy text completions): a 400 naming the door to use."""
        try:
            authenticate(http.headers, self.keys)
            raise EndpointNotServed(
                f"{http.url.path} is not served by this gateway; "
                "send the prompt as a user message to /v1/chat/completions",
                rule="unsupported_endpoint",
                field=None,
            )
        except Exception as exc:
            return error_response(exc, "openai")


def door_of(path: str) -> WireFormat:
    """Which client's error shape a path answers in."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


async def not_found(request: Request, exc: Exception) -> Response:
    """FastAPI's 404 and 405, in the error shape of the door the path belongs to."""
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    kind_o, kind_a = ("not_found_error", "not_found_error")
    if status == 405:
        kind_o = kind_a = "invalid_request_error"
    message = f"{request.method} {request.url.path}: " + (
        "no such route" if status == 404 else "method not allowed"
    )
    rule = "unknown_route" if status == 404 else "method_not_allowed"
    body = error_body(door_of(request.url.path), kind_o, kind_a, message, rule, None)
    headers = getattr(exc, "headers", None) or {}
    return Response(orjson.dumps(body), status, headers, "application/json")


def build_compat_router(routes: CompatRoutes) -> APIRouter:
    router = APIRouter()
    router.add_api_route("/v1/messages/count_tokens", routes.count_tokens, methods=["POST"])
    router.add_api_route("/v1/models/{model_id:path}", routes.model, methods=["GET"])
    router.add_api_route("/v1/completions", routes.not_served, methods=["POST"])
    return router
