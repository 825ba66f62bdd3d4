"""`lantern serve` with a baseline replica picker injected into the fleet, for benchmarks that
compare Lantern's routing with the baselines behind a real gateway (bench/fleet_e2e.py).

    .venv/bin/python -m bench.picked_gateway --config lantern.yaml --port 8080 --picker round_robin
"""

from __future__ import annotations

import argparse

from bench.routing_baselines import PICKERS
from gateway.app import serve
from gateway.fleet.routing_port import Fleet
from gateway.settings import load_settings
from gateway.wiring import build_components


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--picker", choices=sorted(PICKERS), default="lantern")
    args = ap.parse_args(argv)
    settings = load_settings(args.config, port=args.port)
    parts = build_components(settings)
    fleet = parts.pipeline.s.routing
    if not isinstance(fleet, Fleet):
        raise TypeError(f"the gateway's routing port is a {type(fleet).__name__}, not a Fleet")
    fleet.picker = PICKERS[args.picker]
    return serve(settings, components=parts)


if __name__ == "__main__":
    raise SystemExit(main())
