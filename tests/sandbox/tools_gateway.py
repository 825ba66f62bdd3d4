"""A real Lantern gateway process with the tools router attached (python -m), for the
multi-process tests until `gateway/wiring/` attaches it itself: the lead's settings,
components, policy store, API-key auth and `create_app`; the tools router as wiring would add it."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn
from fastapi import Request

from gateway.app import create_app
from gateway.http.auth import authenticate as authenticate_headers
from gateway.http.tools_routes import build_tools_router
from gateway.settings import load_settings
from gateway.wiring import build_components
from policies.model import TenantPolicy
from sandbox.assembly import build_tool_run_service
from sandbox.idempotency import create_store_engine


def main(args: argparse.Namespace) -> None:
    settings = load_settings(args.config)
    components = build_components(settings)
    engine = create_store_engine(settings.tool_store_url())  # as the gateway builds it
    service, local = build_tool_run_service(
        engine,
        logging.getLogger("lantern.sandbox"),
        lease_s=args.lease,
        egress_allow_cidrs=tuple(args.allow_cidr),
    )

    async def authenticate(request: Request) -> tuple[TenantPolicy, str]:
        caller = authenticate_headers(request.headers, components.policies)
        return caller.tenant, caller.key_id

    async def close_runner() -> None:  # uvicorn re-raises SIGTERM after shutdown: no finally
        local.close()

    components.tools_router = build_tools_router(service, authenticate)
    components.on_stop.append(close_runner)
    app = create_app(settings, components)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--allow-cidr", action="append", default=[])
    main(parser.parse_args(sys.argv[1:]))
