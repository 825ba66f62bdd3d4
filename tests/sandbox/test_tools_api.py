"""POST/GET /v1/tools/runs through a real FastAPI app and HTTP client (ASGI transport)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI, Request

from gateway.errors import AuthenticationFailed
from gateway.http.tools_routes import build_tools_router, tool_spec
from policies.model import TenantPolicy
from policies.tools import ToolLimits, ToolPolicy
from sandbox.assembly import build_tool_run_service
from sandbox.idempotency import IdempotencyStore
from sandbox.local_runner import LocalRunner
from sandbox.service import ToolRunService
from sandbox.types import ToolRunRequest
from tests.sandbox.conftest import ManualClock
from tests.sandbox.fakes import FakeRunner

POLICY = TenantPolicy(
    tenant="acme",
    tools=(
        ToolPolicy(
            name="run_python",
            command=("python3", "-c", "{code}"),
            limits=ToolLimits(wall_s=10, memory_mb=256, cpu_s=5, output_kb=4),
        ),
    ),
)


async def authenticate(request: Request) -> tuple[TenantPolicy, str]:
    if request.headers.get("authorization") != "Bearer sk-acme":
        raise AuthenticationFailed("invalid API key")  # the gateway's own error
    return POLICY, "k1"


def _client(runner: object, engine: sa.Engine, clock: ManualClock) -> httpx.AsyncClient:
    store = IdempotencyStore(engine, clock)
    service = ToolRunService(store, runner, clock, logging.getLogger("t"))  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(build_tools_router(service, authenticate))
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://lantern",
        headers={"authorization": "Bearer sk-acme"},
    )


BODY = {"tool": "run_python", "arguments": {"code": "print(6*7)"}}


@pytest.mark.sandbox
def test_run_replay_and_get_with_the_real_sandbox(
    default_backend: str,
    sqlite_engine: sa.Engine,
    clock: ManualClock,
    make_runner: Callable[..., LocalRunner],
) -> None:
    async def scenario() -> None:
        async with _client(make_runner(), sqlite_engine, clock) as client:
            first = await client.post(
                "/v1/tools/runs", json=BODY, headers={"Idempotency-Key": "k-1"}
            )
            assert first.status_code == 200 and "idempotent-replayed" not in first.headers
            run = first.json()
            assert (run["status"], run["exit_code"], run["stdout"], run["object"]) == (
                "succeeded",
                0,
                "42\n",
                "tool.run",
            )
            again = await client.post(
                "/v1/tools/runs", json=BODY, headers={"Idempotency-Key": '"k-1"'}
            )
            assert (again.content, again.headers["idempotent-replayed"]) == (first.content, "true")
            got = await client.get(f"/v1/tools/runs/{run['id']}")
            assert got.content == first.content

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("body", "headers", "status", "code", "param"),
    [
        (BODY, {}, 400, "idempotency_key_invalid", "Idempotency-Key"),
        (BODY, {"Idempotency-Key": "x" * 256}, 400, "idempotency_key_invalid", "Idempotency-Key"),
        (
            {"tool": "rm_rf", "arguments": {}},
            {"Idempotency-Key": "k"},
            403,
            "tool_not_allowed",
            "tool",
        ),
        (  # limits the tool would refuse, for a tool the tenant does not have: still 403
            {"tool": "rm_rf", "arguments": {}, "limits": {"wall_s": 3600}},
            {"Idempotency-Key": "k"},
            403,
            "tool_not_allowed",
            "tool",
        ),
        (
            {"tool": "run_python", "arguments": {"cmd": "x"}},
            {"Idempotency-Key": "k"},
            400,
            "invalid_tool_request",
            "arguments.cmd",
        ),
        (
            {**BODY, "limits": {"wall_s": 11}},
            {"Idempotency-Key": "k"},
            400,
            "invalid_tool_request",
            "limits.wall_s",
        ),
        ({**BODY, "shell": True}, {"Idempotency-Key": "k"}, 400, "invalid_tool_request", "shell"),
    ],
)
def test_errors_use_the_openai_shape(
    sqlite_engine: sa.Engine,
    clock: ManualClock,
    body: dict[str, object],
    headers: dict[str, str],
    status: int,
    code: str,
    param: str,
) -> None:
    async def scenario() -> httpx.Response:
        async with _client(FakeRunner(clock), sqlite_engine, clock) as client:
            return await client.post("/v1/tools/runs", json=body, headers=headers)

    reply = asyncio.run(scenario())
    assert reply.status_code == status
    error = reply.json()["error"]
    assert (error["code"], error["param"], set(error)) == (
        code,
        param,
        {"message", "type", "param", "code"},
    )


def test_reuse_conflict_and_derived_keys(sqlite_engine: sa.Engine, clock: ManualClock) -> None:
    runner = FakeRunner(clock)

    async def scenario() -> None:
        async with _client(runner, sqlite_engine, clock) as client:
            runner.release.clear()
            first = asyncio.create_task(
                client.post("/v1/tools/runs", json=BODY, headers={"Idempotency-Key": "k-2"})
            )
            while not runner.jobs:
                await asyncio.sleep(0.01)
            busy = await client.post(
                "/v1/tools/runs", json=BODY, headers={"Idempotency-Key": "k-2"}
            )
            assert (busy.status_code, busy.headers["retry-after"]) == (409, "1")
            assert busy.json()["error"]["code"] == "idempotency_key_in_use"
            runner.release.set()
            assert (await first).status_code == 200
            other = {"tool": "run_python", "arguments": {"code": "print(1)"}}
            reused = await client.post(
                "/v1/tools/runs", json=other, headers={"Idempotency-Key": "k-2"}
            )
            assert (reused.status_code, reused.json()["error"]["code"]) == (
                422,
                "idempotency_key_reused",
            )
            derived = {**BODY, "tool_call_id": "call_abc"}
            one = await client.post("/v1/tools/runs", json=derived, headers={"x-session-id": "s-1"})
            two = await client.post("/v1/tools/runs", json=derived, headers={"x-session-id": "s-1"})
            assert (one.status_code, two.headers["idempotent-replayed"]) == (200, "true")
            missing = await client.get("/v1/tools/runs/nope")
            assert (missing.status_code, missing.json()["error"]["code"]) == (
                404,
                "tool_run_not_found",
            )
            anonymous = await client.get("/v1/tools/runs/nope", headers={"authorization": "x"})
            assert (anonymous.status_code, anonymous.json()["error"]["message"]) == (
                401,
                "invalid API key",
            )
            denied = await client.post("/v1/tools/runs", json=BODY, headers={"authorization": "x"})
            assert denied.status_code == 401

    asyncio.run(scenario())
    assert len(runner.jobs) == 2


def test_policy_becomes_the_sandbox_spec() -> None:
    policy = ToolPolicy(
        name="t",
        runner="fargate",
        command=("x", "{a}"),
        egress=("api.example.com",),
        cluster="c",
        task_definition="td:3",
        subnets=("s",),
        security_groups=("g",),
        task_role_arn="arn:aws:iam::1:role/r",
        log_group="/g",
        image="img@sha256:1",
    )
    spec = tool_spec(policy)
    assert (spec.runner, spec.command, spec.egress, spec.limits.wall_s) == (
        "fargate",
        ("x", "{a}"),
        ("api.example.com",),
        30,
    )
    assert spec.fargate is not None and (spec.fargate.task_definition, spec.fargate.image) == (
        "td:3",
        "img@sha256:1",
    )
    assert json.dumps(spec.fargate.subnets) == '["s"]'


@pytest.mark.sandbox
def test_assembled_service_runs_a_tool(default_backend: str, tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    service, local = build_tool_run_service(engine, logging.getLogger("t"), lease_s=5)
    specs = (tool_spec(POLICY.tools[0]),)
    request = ToolRunRequest("acme", "k1", "key-1", "run_python", (("code", "print(1+1)"),))
    try:
        reply = asyncio.run(service.submit(specs, request))
    finally:
        local.close()
        engine.dispose()
    assert json.loads(reply.body)["stdout"] == "2\n"


def test_the_api_schema_lists_every_status_a_run_can_answer(
    sqlite_engine: sa.Engine, clock: ManualClock
) -> None:
    """The OpenAPI document names each error status of docs/sandbox.md's table (a client
    generated from it knows 403 tool_not_allowed, 422 idempotency_key_reused, 502 ...)."""
    store = IdempotencyStore(sqlite_engine, clock)
    service = ToolRunService(store, FakeRunner(clock), clock, logging.getLogger("t"))  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(build_tools_router(service, authenticate))
    paths = app.openapi()["paths"]
    post = paths["/v1/tools/runs"]["post"]["responses"]
    get = paths["/v1/tools/runs/{run_id}"]["get"]["responses"]
    assert sorted(post) == [
        "200", "400", "401", "403", "409", "413", "422", "429", "500", "502", "503",
    ]  # fmt: skip
    assert sorted(get) == ["200", "401", "404", "422", "503"]  # 422: FastAPI's, for run_id
