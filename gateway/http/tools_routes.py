"""HTTP for sandboxed tool runs: POST /v1/tools/runs and GET /v1/tools/runs/{id}.

Parses, authenticates (via the injected dependency), converts policy to `sandbox` types,
calls ToolRunService, and shapes replies; every sandbox error becomes the OpenAI error shape.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.errors import WireFormatError
from gateway.core.identifiers import check_identifier
from gateway.errors import GatewayError
from gateway.http.api_schema import OpenAIError, ToolRunOutcome, errors, json_body
from gateway.http.errors import to_http
from gateway.http.request_body import BodyLimits, parse_object, read_body
from gateway.http.tool_traces import trace_unparsed, traced_submit
from gateway.telemetry import Telemetry
from policies.model import TenantPolicy
from policies.tools import ToolPolicy
from sandbox.errors import InvalidToolRequest, SandboxError
from sandbox.fingerprint import derive_key, parse_idempotency_key
from sandbox.service import ToolRunService
from sandbox.types import FargateTarget, ToolLimits, ToolRunReply, ToolRunRequest, ToolSpec

Authenticate = Callable[[Request], Awaitable[tuple[TenantPolicy, str]]]


class RequestedToolLimits(BaseModel):
    """Limits a call may ask for: finite, positive, and (checked in `_limits`) no higher than
    the tool's policy."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    wall_s: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    cpu_s: float | None = Field(default=None, gt=0)
    output_kb: int | None = Field(default=None, gt=0)
    max_procs: int | None = Field(default=None, gt=0)
    file_mb: int | None = Field(default=None, gt=0)


class ToolRunBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1)
    arguments: dict[str, str | int | float] = {}  # orjson refuses NaN and Infinity
    limits: RequestedToolLimits | None = None
    tool_call_id: str | None = None


def tool_spec(policy: ToolPolicy) -> ToolSpec:
    """The sandbox's view of one declared tool."""
    limits = ToolLimits(**policy.limits.model_dump())
    fargate = None
    if policy.runner == "fargate":
        fargate = FargateTarget(
            cluster=policy.cluster,
            task_definition=policy.task_definition,
            subnets=policy.subnets,
            security_groups=policy.security_groups,
            task_role_arn=policy.task_role_arn,
            log_group=policy.log_group,
            container_name=policy.container_name,
            log_stream_prefix=policy.log_stream_prefix,
            image=policy.image,
            proxy_url=policy.proxy_url,
        )
    return ToolSpec(policy.name, policy.command, policy.runner, policy.egress, limits, fargate)


def _error(exc: SandboxError) -> JSONResponse:
    body = {
        "error": {"message": str(exc), "type": exc.error_type, "param": exc.param, "code": exc.code}
    }
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else {}
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def _reply(reply: ToolRunReply) -> Response:
    headers = {"Idempotent-Replayed": "true"} if reply.replayed else {}
    return Response(
        reply.body, status_code=reply.http_status, media_type="application/json", headers=headers
    )


async def _body(request: Request, limits: BodyLimits) -> ToolRunBody:
    raw = await read_body(request, limits.max_bytes)
    try:
        return ToolRunBody.model_validate(parse_object(raw, limits.max_depth))
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"]) or "body"
        raise InvalidToolRequest(where, exc.errors()[0]["msg"]) from exc
    except WireFormatError as exc:
        raise InvalidToolRequest(exc.field, exc.reason) from exc


def _limits(asked: RequestedToolLimits, declared: ToolLimits) -> ToolLimits:
    """The tool's policy limits with the call's lower ones; a higher one is refused."""
    lowered = {k: v for k, v in asked.model_dump().items() if v is not None}
    for name, value in lowered.items():
        cap = getattr(declared, name)
        if value > cap:
            raise InvalidToolRequest(f"limits.{name}", f"{value} exceeds the tool's limit {cap}")
    return dataclasses.replace(declared, **lowered)


async def _parse(
    request: Request, limits: BodyLimits, policy: TenantPolicy, key_id: str
) -> tuple[ToolRunRequest, tuple[ToolSpec, ...], str | None]:
    """Validated entirely before the service sees it: a refused request claims no key. The
    run, the tenant's tools, and the model's tool call id when the body names it."""
    body = await _body(request, limits)
    header = request.headers.get("idempotency-key")
    session = request.headers.get("x-session-id")
    if session is not None:  # the run's ledger row holds it: as every door checks it
        check_identifier("x-session-id", session)
    if header is None and session and body.tool_call_id:
        key = derive_key(session, body.tool_call_id)
    else:
        key = parse_idempotency_key(header)
    specs = tuple(tool_spec(tool) for tool in policy.tools)
    run_limits = None
    declared = next((s.limits for s in specs if s.name == body.tool), None)
    if body.limits is not None and declared is not None:  # no such tool: the service's 403
        run_limits = _limits(body.limits, declared)
    arguments = tuple(sorted((k, str(v)) for k, v in body.arguments.items()))
    cap = policy.tool_runs.max_concurrent
    run = ToolRunRequest(
        policy.tenant,
        key_id,
        key,
        body.tool,
        arguments,
        run_limits,
        cap,
        session_id=session or None,
    )
    return run, specs, body.tool_call_id


RUN_ERRORS = (400, 401, 403, 409, 413, 422, 429, 500, 502, 503)  # docs/sandbox.md's table
IDEMPOTENCY_KEY = {
    "name": "idempotency-key",
    "in": "header",
    "required": False,
    "description": "replays the first outcome of a run with this key (or x-session-id + "
    "tool_call_id)",
    "schema": {"type": "string"},
}


def build_tools_router(
    service: ToolRunService,
    authenticate: Authenticate,
    limits: BodyLimits | None = None,
    telemetry: Telemetry | None = None,
) -> APIRouter:
    """`authenticate` returns the caller's policy and key id, or raises the gateway's
    `AuthenticationFailed` (mapped by `gateway.http.errors.to_http`, as for chat routes); it runs
    before the body is read, and the body is read no further than `limits.max_bytes`. With
    `telemetry` tracing, each run is an `execute_tool` span in the client's trace."""
    body_limits = limits or BodyLimits.from_settings()
    router = APIRouter()

    @router.post(
        "/v1/tools/runs",
        openapi_extra={**json_body(ToolRunBody), "parameters": [IDEMPOTENCY_KEY]},
        responses={200: {"model": ToolRunOutcome}, **errors(OpenAIError, *RUN_ERRORS)},
    )
    async def create_run(request: Request) -> Response:
        traced = telemetry if telemetry is not None and telemetry.is_tracing else None
        began_ns = 0 if traced is None else time.time_ns()
        policy = run = None
        try:
            policy, key_id = await authenticate(request)
            run, specs, call_id = await _parse(request, body_limits, policy, key_id)
            if traced is not None:
                at = (request.headers, began_ns)
                return _reply(await traced_submit(traced, service, specs, run, call_id, *at))
            return _reply(await service.submit(specs, run))
        except SandboxError as exc:
            trace_unparsed(traced, request.headers, policy, run, exc.code)
            return _error(exc)
        except GatewayError as exc:
            trace_unparsed(traced, request.headers, policy, run, type(exc).__name__)
            return _gateway_error(exc)

    @router.get(
        "/v1/tools/runs/{run_id}",
        responses={200: {"model": ToolRunOutcome}, **errors(OpenAIError, 401, 404, 503)},
    )
    async def read_run(run_id: str, request: Request) -> Response:
        try:
            policy, _ = await authenticate(request)
            return _reply(await service.get(policy.tenant, run_id))
        except SandboxError as exc:
            return _error(exc)
        except GatewayError as exc:
            return _gateway_error(exc)

    return router


def _gateway_error(exc: GatewayError) -> Response:
    err = to_http(exc, "openai")
    return JSONResponse(err.body, status_code=err.status_code, headers=err.headers)
