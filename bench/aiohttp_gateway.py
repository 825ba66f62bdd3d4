"""`lantern serve` with every upstream on aiohttp instead of the gateway's own HTTP/1.1 client, so
`bench.gateway_overhead --aiohttp-lantern` can show what that client earns, side by side.

    .venv/bin/python -m bench.aiohttp_gateway --config lantern.yaml --port 8080
"""

from __future__ import annotations

import argparse

from adapters.http.aiohttp_pool import AiohttpPool
from gateway.app import serve
from gateway.settings import load_settings
from gateway.wiring import process as wiring


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    settings = load_settings(args.config, port=args.port)
    # the one pool build_components makes, swapped for this benchmark only
    wiring.Http1Pool = lambda max_connections: AiohttpPool(max_connections=max_connections)  # type: ignore[assignment,misc]
    return serve(settings, components=wiring.build_components(settings))


if __name__ == "__main__":
    raise SystemExit(main())
