"""The FastAPI application: `create_app(settings)` builds it, `serve(settings)` runs it.

Everything long-lived is built by `gateway.wiring.build_components`; the lifespan only starts
and stops it. No module globals.
"""

from __future__ import annotations

import gc
import logging
import math
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from adapters.types import WireFormat
from gateway.apikeys.records import KeyRecords
from gateway.core.embeddings import Embeddings
from gateway.http.admin_keys import KeyIssueBody, build_keys_router
from gateway.http.admin_routes import build_admin_router, build_ops_router
from gateway.http.api_schema import component_schemas
from gateway.http.chat_routes import ChatRoutes, build_chat_router
from gateway.http.compat_routes import CompatRoutes, build_compat_router, not_found
from gateway.http.console.login import ConsoleSessions
from gateway.http.console.pages import ConsoleData
from gateway.http.console.routes import Console, build_console_router
from gateway.http.console.session_store import ConsoleSessionStore
from gateway.http.console.throttle import LoginThrottle
from gateway.http.database_down import database_unavailable
from gateway.http.embeddings_routes import build_embeddings_router
from gateway.http.idempotent_doors import IdempotentDoors
from gateway.http.readiness import Readiness
from gateway.http.request_body import BodyLimits
from gateway.http.responses_routes import ResponsesRoutes, build_responses_router
from gateway.http.responses_schema import ResponsesCreateRequest
from gateway.http.tools_routes import ToolRunBody
from gateway.http.workers import supervise
from gateway.responses.turns import Turns
from gateway.settings import Settings
from gateway.wiring import GatewayProcess, build_components

log = logging.getLogger("lantern.app")
# how long a stopping gateway waits for the store writes of streamed turns whose clients left
STORE_WRITES_DRAIN_S = 5.0
DOORS: dict[str, WireFormat] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}


class LanternApp(FastAPI):
    """FastAPI, with the two chat doors served before its middleware stack and router (the hot
    path: their handler parses its own body and turns every error into the client's own error
    shape, so the stack would only add CPU per call). Every other path, and a door called with
    another method or a trailing slash, goes through FastAPI as before."""

    chat_routes: ChatRoutes | None = None  # None: the doors go through FastAPI too

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routes = self.chat_routes
        if routes is not None and scope["type"] == "http" and scope["method"] == "POST":
            wire = DOORS.get(scope["path"])
            if wire is not None and not self.root_path:
                scope["app"] = self
                response = await routes.serve(Request(scope, receive), wire)
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """FastAPI's description plus the schemas of the bodies that routes parse themselves
        (declared by reference in their `openapi_extra`)."""
        if self.openapi_schema is None:
            spec = super().openapi()
            spec.setdefault("components", {}).setdefault("schemas", {}).update(
                component_schemas((ToolRunBody, ResponsesCreateRequest, KeyIssueBody))
            )
        return super().openapi()


def create_app(settings: Settings, components: GatewayProcess | None = None) -> LanternApp:
    """The app over `components` (built from `settings` when not given). The chat doors are
    served by `LanternApp` ahead of FastAPI's stack and stream through `SSEReply`; the reference
    paths (FastAPI's router, Starlette's `StreamingResponse`) are test and benchmark wiring."""
    parts = components or build_components(settings)
    readiness = Readiness(parts.readiness_checks)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await parts.start()
        readiness.started()
        try:
            yield
        finally:
            readiness.drain()
            parts.pipeline.after_reply.flush()  # the last replies' rows, before the ledger closes
            await responses.writes.drain(STORE_WRITES_DRAIN_S)  # turns of clients that left
            await parts.stop()

    app = LanternApp(
        title="Lantern", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.components = parts
    app.state.readiness = readiness
    lookup = parts.lookup or parts.policies
    limits = BodyLimits.from_settings(settings.http)  # one set of large-body threads for all
    chat = ChatRoutes(parts.pipeline, lookup, limits)
    app.include_router(build_chat_router(chat))  # also the reference path of the doors
    app.chat_routes = chat
    turns = Turns(parts.response_store, limits.max_messages, limits.offload_bytes)
    responses = ResponsesRoutes(parts.pipeline, lookup, turns, limits)
    app.include_router(build_responses_router(responses))
    if parts.replay is not None:
        chat.replay = responses.replay = IdempotentDoors(parts.replay, lookup, limits)
    compat = CompatRoutes(parts.pipeline, lookup, limits)
    app.include_router(build_compat_router(compat))
    embeddings = Embeddings(parts.pipeline.s)
    app.include_router(build_embeddings_router(embeddings, lookup, limits))
    app.add_exception_handler(StarletteHTTPException, not_found)
    app.add_exception_handler(SQLAlchemyError, database_unavailable)
    metrics_token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    app.include_router(
        build_ops_router(parts.models, lookup, parts.metrics, metrics_token, readiness)
    )
    admin_token = settings.admin_token.get_secret_value() if settings.admin_token else None
    app.include_router(build_admin_router(admin_token, parts.admin_views))
    if parts.sessions is not None:
        include_console(app, settings, parts, admin_token)
    if parts.tools_router is not None:
        app.include_router(parts.tools_router)
    if parts.mcp_door is not None:  # an ASGI app: the MCP SDK reads its own requests
        app.router.routes.append(Route("/mcp", parts.mcp_door, methods=["GET", "POST", "DELETE"]))
    return app


async def _freeze_gc() -> None:
    """Move everything built at start-up out of the collector's reach: hundreds of thousands of
    long-lived objects, whose full pass would be a latency spike. For a serving process, not for
    tests that build many apps in one interpreter."""
    gc.collect()
    gc.freeze()


def include_console(
    app: FastAPI, settings: Settings, parts: GatewayProcess, admin_token: str | None
) -> None:
    """`/admin/keys` and the web console at `/console`, over the ledger database."""
    assert parts.sessions is not None
    records = KeyRecords(parts.sessions, _utc_now, settings.api_keys.max_live_per_tenant)
    names = list(parts.models.names())
    limits = BodyLimits.from_settings(settings.http)
    app.include_router(build_keys_router(admin_token, records, parts.policies.get, names, limits))
    data = ConsoleData(parts.sessions, parts.policies, records, settings)
    app.include_router(build_console_router(_console(settings, data, admin_token, names)))


def _console(
    settings: Settings, data: ConsoleData, admin_token: str | None, names: list[str]
) -> Console:
    """The console's logins in the ledger database (shared by every process), its login
    throttle per process."""
    wanted = settings.console
    store = ConsoleSessionStore(data.sessions, wanted.max_sessions)
    secret = settings.resolve_server_secret()
    auth = ConsoleSessions(admin_token, secret, store, _utc_now, wanted.session_ttl_s)
    throttle = LoginThrottle(wanted.max_login_failures, wanted.login_window_s, time.monotonic)
    return Console(data, auth, throttle, names, _utc_now, wanted.secure_cookie)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def serve(settings: Settings, workers: int = 1, components: GatewayProcess | None = None) -> int:
    """Run the gateway in the foreground (the `lantern serve` command); `workers` > 1: that many
    processes on the port (`gateway.http.workers`). `components`: built from `settings` when
    not given (one process only)."""
    _log_setup("")
    if workers > 1:
        return supervise(settings, workers, run_server)
    return run_server(settings, components=components)


def _log_setup(tag: str) -> None:
    """INFO to stderr; httpx's line per request (the engines' load polls, every second; the
    health checks) only when it warns."""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s %(levelname)s {tag}%(name)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)


def run_server(
    settings: Settings,
    sock: socket.socket | None = None,
    *,
    name: str = "",
    components: GatewayProcess | None = None,
) -> int:
    """One serving process: on `sock` when given (a worker's), else it binds host:port. SIGTERM
    drains: /ready turns 503, after `http.drain_grace_s` the listener closes, calls in flight
    get `http.drain_timeout_s` to finish, then the ledger is flushed and the process exits."""
    import uvicorn

    from gateway.http.server import TickServer, deadline_protocol
    from gateway.http.workers import WorkerTag

    _log_setup(f"{name} " if name else "")
    parts = components or build_components(settings)
    parts.on_start.append(_freeze_gc)  # last: after every other start-up step
    app = create_app(settings, parts)
    config = uvicorn.Config(
        WorkerTag(app, name) if name else app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",  # named, not "auto"
        # httptools, named: a missing uvicorn[standard] fails loudly instead of serving on the
        # slower pure-Python parser; with header and body read deadlines for slow clients
        http=deadline_protocol(settings.http.header_timeout_s, settings.http.body_timeout_s),
        log_level="info",
        access_log=False,
        timeout_keep_alive=settings.http.keep_alive_s,
        timeout_graceful_shutdown=math.ceil(settings.http.drain_timeout_s),
    )
    server = TickServer(
        config, readiness=app.state.readiness, drain_grace_s=settings.http.drain_grace_s
    )
    server.run(sockets=[sock] if sock is not None else None)
    return 0
