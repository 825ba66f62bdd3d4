"""Operational routes: models list, health, Prometheus metrics, and the admin views.

`/admin/*` needs the admin token (Bearer or x-api-key); nothing here returns prompt text.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.errors import AuthenticationFailed
from gateway.http.api_schema import Health, ModelList, OpenAIError, Ready, errors
from gateway.http.auth import KeyLookup, authenticate, is_admin, presents_token
from gateway.http.chat_routes import error_response
from gateway.http.error_shapes import error_body
from gateway.http.readiness import Readiness
from gateway.ports import ModelTable
from gateway.reports.rows import MAX_VIEW_ROWS, InvalidReportQuery
from gateway.telemetry import Metrics
from gateway.telemetry.metrics import OPENMETRICS_TYPE

JsonView = Callable[[Request], Awaitable[Any]]


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


_PERIOD = (
    _query("since", {"type": "string"}, "ISO date or instant (default: the month's start)"),
    _query("until", {"type": "string"}, "ISO date (inclusive) or instant (default: now)"),
)
ADMIN_QUERIES: dict[str, tuple[dict[str, Any], ...]] = {  # the query each admin view reads
    "reports/cost": (
        *_PERIOD,
        _query(
            "group_by",
            {"type": "array", "items": {"type": "string"}},
            "tenant, model, backend, key, day, month, door or kind (not session: see "
            f"reports/sessions); repeated or comma-separated. At most {MAX_VIEW_ROWS:,} rows a "
            "reply: past them a 400 report_too_large asks for a shorter period",
        ),
    ),
    "reports/breakeven": _PERIOD,
    "reports/spend": (
        *_PERIOD,
        _query(
            "dimension",
            {"type": "string"},
            f"tenant, model, backend, key or kind (default tenant); at most {MAX_VIEW_ROWS:,} "
            "amounts (days x values) a reply: past them a 400 report_too_large",
        ),
    ),
    "reports/sessions": (
        *_PERIOD,
        _query("limit", {"type": "integer"}, "sessions per page (at most 200; default 20)"),
        _query("offset", {"type": "integer"}, "sessions to skip (default 0)"),
    ),
}


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value


def json_response(value: Any, status: int = 200) -> Response:
    body = orjson.dumps(
        _jsonable(value), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    )
    return Response(body, status, media_type="application/json")


def build_ops_router(
    models: ModelTable,
    keys: KeyLookup,
    metrics: Metrics,
    metrics_token: str | None = None,
    readiness: Readiness | None = None,
) -> APIRouter:
    """`metrics_token`: when set, /metrics answers 401 unless the caller presents it (Bearer or
    x-api-key; Prometheus' `authorization` block sends it as Bearer). `/health` and `/healthz`
    are liveness; `/ready` is 200 only while `readiness` says ready (a load balancer's probe)."""
    router = APIRouter()
    ready_state = readiness or Readiness()

    @router.get("/v1/models", responses={200: {"model": ModelList}, **errors(OpenAIError, 401)})
    async def list_models(request: Request) -> Response:
        try:
            caller = authenticate(request.headers, keys)
        except AuthenticationFailed as exc:
            return error_response(exc, "openai")
        allowed = caller.tenant.models
        names = [m for m in models.names() if not allowed or m in allowed]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "lantern"} for n in names]
        return json_response({"object": "list", "data": data})

    @router.get("/healthz", responses={200: {"model": Health}})
    @router.get("/health", responses={200: {"model": Health}})
    async def healthz() -> Response:
        return json_response({"status": "ok"})

    @router.get("/ready", responses={200: {"model": Ready}, 503: {"model": Ready}})
    async def ready() -> Response:
        state = ready_state.state
        problems = await asyncio.to_thread(ready_state.problems) if state == "ready" else ()
        if problems:
            return json_response({"status": "degraded", "problems": list(problems)}, 503)
        return json_response({"status": state}, 200 if state == "ready" else 503)

    @router.get(
        "/metrics",
        responses={200: {"content": {"text/plain": {}}}, **errors(OpenAIError, 401)},
    )
    async def prometheus(request: Request) -> Response:
        if metrics_token is not None and not presents_token(request.headers, metrics_token):
            return error_response(AuthenticationFailed("metrics token required"), "openai")
        if "application/openmetrics-text" in request.headers.get("accept", ""):  # has exemplars
            return Response(metrics.render(openmetrics=True), media_type=OPENMETRICS_TYPE)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


def build_admin_router(admin_token: str | None, views: dict[str, JsonView]) -> APIRouter:
    """`views` maps a path under /admin to an async function producing JSON-able data."""
    router = APIRouter()

    def guarded(view: JsonView) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            if not is_admin(request.headers, admin_token):
                return error_response(AuthenticationFailed("admin token required"), "openai")
            try:
                return json_response(await view(request))
            except InvalidReportQuery as exc:  # names its parameter: the error's `param`
                kind = "invalid_request_error"
                return json_response(
                    error_body("openai", kind, kind, str(exc), exc.rule, exc.field), 400
                )

        return handler

    for path, view in views.items():
        router.add_api_route(
            f"/admin/{path}",
            guarded(view),
            methods=["GET"],
            openapi_extra={"parameters": list(ADMIN_QUERIES.get(path, ()))},
            responses={200: {"content": {"application/json": {}}}, **errors(OpenAIError, 400, 401)},
        )
    return router
