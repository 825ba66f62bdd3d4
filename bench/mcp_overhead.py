"""Latency Lantern's `/mcp` adds to an upstream MCP tool call: the same `lookup_order` call of
an upstream made with the SDK (`tests/mcp/orders_server.py`, its own process), made directly
and through a `lantern serve` that grants it, side by side.

    .venv/bin/python -m bench.mcp_overhead [--calls 1000] [--mode auto|legacy]

Closed loop, one call in flight: each round makes one direct call and one through Lantern (the
order alternating), so drift of the shared machine hits both alike. Both use the official SDK
client (`mode`: `auto` takes the 2026-07-28 wire, `legacy` the initialize handshake and a
session). Lantern's own link to the upstream is the SDK client too, held open across calls.
Reports p50/p99 per target and the added p50/p99 (through - direct, per percentile).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from tests.e2e.harness import write_policy
from tests.mcp.clients import mcp_client
from tests.mcp.harness import ACME_KEY, lantern_serve, upstream_server

WARMUP = 50


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(
    direct_url: str, lantern_url: str, calls: int, mode: str
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"direct": [], "lantern": []}
    async with (
        mcp_client(direct_url, "unused", mode) as direct,
        mcp_client(lantern_url, ACME_KEY, mode) as lantern,
    ):
        targets = {
            "direct": (direct, "lookup_order"),
            "lantern": (lantern, "orders__lookup_order"),
        }
        for i in range(WARMUP + calls):
            order = ("direct", "lantern") if i % 2 else ("lantern", "direct")
            for name in order:
                client, tool = targets[name]
                start = time.perf_counter()
                result = await client.call_tool(tool, {"order_id": f"A-{i}"})
                elapsed_ms = (time.perf_counter() - start) * 1000
                if result.is_error:
                    raise RuntimeError(f"{name}: {result.content}")
                if i >= WARMUP:
                    times[name].append(elapsed_ms)
    return times


def summary(times: dict[str, list[float]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, values in times.items():
        out[name] = {
            "p50_ms": round(statistics.median(values), 3),
            "p99_ms": round(percentile(values, 0.99), 3),
        }
    for q, key in ((0.5, "p50_ms"), (0.99, "p99_ms")):
        added = percentile(times["lantern"], q) - percentile(times["direct"], q)
        out[f"added_{key}"] = round(added, 3)
    out["calls"] = len(times["direct"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="measured calls per target")
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto")
    parser.add_argument("--out", type=Path, help="also write the summary here (JSON)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-bench-") as tmp:
        var_dir = Path(tmp)
        (var_dir / "policies").mkdir()
        write_policy(var_dir / "policies", "acme", ACME_KEY, mcp_servers=["orders"])
        with upstream_server(var_dir, "orders") as orders:
            servers = [{"name": "orders", "url": orders.url, "timeout_s": 10}]
            with lantern_serve(var_dir, mcp_servers=servers) as gw:
                times = asyncio.run(measure(orders.url, gw.mcp_url, args.calls, args.mode))
    result = {"mode": args.mode, **summary(times)}
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
