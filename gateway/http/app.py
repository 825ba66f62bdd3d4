"""The FastAPI application: `create_app(settings)` builds it, `serve(settings)` runs it.

Everything long-lived is built by `gateway.wiring.build_components`; the lifespan only starts
and stops it. No module globals.
"""

from __future__ import annotations

import gc
import logging
import math
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from adapters.types import WireFormat
from gateway.http.admin_routes import build_admin_router, build_ops_router
from gateway.http.api_schema import component_schemas
from gateway.http.chat_routes import ChatRoutes, build_chat_router
from gateway.http.readiness import Readiness
from gateway.http.request_body import BodyLimits
from gateway.http.tools_routes import ToolRunBody
from gateway.settings import Settings
from gateway.wiring import Components, build_components

log = logging.getLogger("lantern.app")
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
                component_schemas((ToolRunBody,))
            )
        return super().openapi()


def create_app(
    settings: Settings,
    components: Components | None = None,
    *,
    freeze_gc: bool = False,
    lean_stream: bool = True,
    lean_doors: bool = True,
) -> FastAPI:
    """`freeze_gc`: after start-up, move everything built so far out of the collector's reach
    (hundreds of thousands of long-lived objects; a full pass over them is a latency spike).
    For a serving process, not for tests that build many apps in one interpreter.
    `lean_stream=False` streams through Starlette's `StreamingResponse` (the reference path);
    `lean_doors=False` serves the chat doors through FastAPI's stack and router (the reference
    path for `LanternApp`)."""
    parts = components or build_components(settings)
    readiness = Readiness()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await parts.start()
        if freeze_gc:
            gc.collect()
            gc.freeze()
        readiness.started()
        try:
            yield
        finally:
            readiness.drain()
            parts.pipeline.after_reply.flush()  # the last replies' rows, before the ledger closes
            await parts.stop()

    app = LanternApp(
        title="Lantern", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None
    )
    app.state.components = parts
    app.state.readiness = readiness
    chat = ChatRoutes(
        parts.pipeline, parts.keys, BodyLimits.from_settings(settings.http), lean_stream=lean_stream
    )
    app.include_router(build_chat_router(chat))  # also the reference path of the doors
    if lean_doors:
        app.chat_routes = chat
    metrics_token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    app.include_router(
        build_ops_router(parts.models, parts.keys, parts.metrics, metrics_token, readiness)
    )
    admin_token = settings.admin_token.get_secret_value() if settings.admin_token else None
    app.include_router(build_admin_router(admin_token, parts.admin_views))
    if parts.tools_router is not None:
        app.include_router(parts.tools_router)
    return app


def serve(settings: Settings, workers: int = 1) -> int:
    """Run the gateway in the foreground (the `lantern serve` command); `workers` > 1: that many
    processes on the port (`gateway.http.workers`)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if workers > 1:
        from gateway.http.workers import supervise

        return supervise(settings, workers)
    return run_server(settings)


def run_server(settings: Settings, sock: socket.socket | None = None, *, name: str = "") -> int:
    """One serving process: on `sock` when given (a worker's), else it binds host:port. SIGTERM
    drains: /ready turns 503, after `http.drain_grace_s` the listener closes, calls in flight
    get `http.drain_timeout_s` to finish, then the ledger is flushed and the process exits."""
    import uvicorn

    from gateway.http.server import TickServer, deadline_protocol
    from gateway.http.workers import WorkerTag

    tag = f"{name} " if name else ""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s %(levelname)s {tag}%(name)s %(message)s"
    )
    app = create_app(settings, freeze_gc=True)
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
        timeout_graceful_shutdown=math.ceil(settings.http.drain_timeout_s),
    )
    server = TickServer(
        config, readiness=app.state.readiness, drain_grace_s=settings.http.drain_grace_s
    )
    server.run(sockets=[sock] if sock is not None else None)
    return 0
