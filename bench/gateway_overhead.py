"""Latency and CPU that Lantern adds over calling the upstream directly, side by side with the
LiteLLM proxy (one worker each), same fake upstream, same agent-sized bodies (≈6,000 tokens + tools).

    .venv/bin/python -m bench.gateway_overhead [--rates 25,50,100,200] [--duration-s 12]
        [--stream | --both] [--skip-litellm] [--previous REF] [--slices 12] [--no-pin]

Open-loop load (aiohttp on uvloop, bodies encoded before the clock starts): call i is due at
i/rate whatever the replies do, and its latency counts from that due time, so queueing shows as
latency. Reports p50/p99 (and TTFB) per target and rate, latency added over direct, CPU ms per
call of the proxy's process tree (the scheduler's clock of each of its threads), and the highest
rate with p99 < 1 s and no errors. Each target's seconds at a rate are cut into `--slices` visits
taken in turn, the proxies in every order, so that the machine's drift hits all alike.
`--previous REF` also serves Lantern as built from REF (bench/previous_build.py) in the same run.
With two cores or more, each proxy runs on the last core and the load generator and the upstream
on the others (`--no-pin`: all share every core).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Coroutine
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop

from bench._procs import PY, ROOT, free_port, split_cores, start, stop, tree_cpu_ns
from bench.overhead_results import Result, Visit, pooled_result, report
from bench.previous_build import previous_build, start_previous

KEY = "sk-bench-key-000000000000000000000000000001"  # also the LiteLLM master key
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "A tool the agent may call. " * 8,
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
        },
    }
    for i in range(8)
]


def agent_body(stream: bool, turn: int) -> dict[str, object]:
    """≈6,000 prompt tokens (o200k, OpenAI's per-message rule) in ≈22.6 KB: 8 tools, a system
    prompt, a long history the agent re-sends every turn, and a short new user turn."""
    history = " ".join(f"step {i} observed value {i * 7} and moved on." for i in range(433))
    body: dict[str, object] = {
        "model": "gpt-4o-mini",
        "max_tokens": 16,
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "You are a careful coding agent. " * 40},
            {"role": "user", "content": history},
            {"role": "user", "content": f"turn {turn} words:12"},
        ],
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    scheduled: float,
) -> tuple[float, float] | None:
    """(latency, time to first body bytes) in ms from the scheduled send time; None on error."""
    first: float | None = None
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            async for _ in resp.content.iter_any():
                if first is None:
                    first = time.perf_counter()
            ok = resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return None
    done = time.perf_counter()
    if not ok:
        return None
    return (done - scheduled) * 1000, ((first or done) - scheduled) * 1000


async def run_rate(
    name: str, base: str, pid: int | None, rate: float, duration_s: float, stream: bool
) -> Result:
    """One visit of `duration_s` at `rate` (see `visit`), as a result."""
    calls = await visit(base, pid, rate, duration_s, stream)
    return pooled_result("stream" if stream else "non-stream", name, rate, [calls])


async def visit(
    base: str, pid: int | None, rate: float, duration_s: float, stream: bool, turn0: int = 0
) -> Visit:
    """Open loop: call i is due at t0 + i/rate whatever earlier calls are doing, and its latency
    counts from that due time, so a target that falls behind shows it as latency. Five calls
    one by one first (connections, caches), unmeasured; bodies from turn `turn0` on."""
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    url = f"{base}/chat/completions"
    n = int(rate * duration_s)
    # encoded up front; each call a new turn of the same history, as an agent sends them
    bodies = [orjson.dumps(agent_body(stream, turn0 + i)) for i in range(n + 5)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for turn in range(5):  # warm connections and caches
            await _one(session, url, bodies[n + turn], headers, time.perf_counter())
        cpu0 = tree_cpu_ns(pid) if pid else 0
        t0 = time.perf_counter() + 0.01
        tasks = []
        for i in range(n):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, bodies[i], headers, due)))
        done = await asyncio.gather(*tasks)
        cpu = (tree_cpu_ns(pid) - cpu0) if pid else float("nan")
    ok = [x for x in done if x is not None]
    return Visit([x[0] for x in ok], [x[1] for x in ok], n, cpu)


def write_lantern_config(tmp: Path, upstream: str) -> Path:
    (tmp / "policies").mkdir()
    (tmp / "policies" / "bench.yaml").write_text(
        "tenant: bench\napi_keys:\n"
        f'  - {{id: k1, sha256: "{hashlib.sha256(KEY.encode()).hexdigest()}"}}\n'
    )
    cfg = tmp / "lantern.yaml"
    cfg.write_text(
        json.dumps(
            {
                "database_url": f"sqlite:///{tmp}/lantern.db",
                "policy_dir": str(tmp / "policies"),
                "var_dir": str(tmp),
                "server_secret": "bench",
                "models": [
                    {
                        "name": "gpt-4o-mini",
                        "backends": [
                            {
                                "kind": "openai_compatible",
                                "name": "fake",
                                "base_url": upstream,
                                "model": "gpt-4o-mini",
                            }
                        ],
                    }
                ],
            }
        )
    )
    return cfg


def write_litellm_config(tmp: Path, upstream: str) -> Path:
    cfg = tmp / "litellm.yaml"
    cfg.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": "gpt-4o-mini",
                        "litellm_params": {
                            "model": "openai/gpt-4o-mini",
                            "api_base": upstream,
                            "api_key": "unused",
                        },
                    }
                ],
                "general_settings": {"master_key": KEY},
            }
        )
    )
    return cfg


Target = tuple[str, str, int | None]  # (name, base URL, pid whose process tree is the proxy)
ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY_DISABLED": "true"}


class _Unrecorded(list[Any]):
    """The fake keeps every request for tests to inspect; a benchmark must not grow by 22 KB a
    call for minutes on end."""

    def append(self, item: Any) -> None:
        pass


def serve_upstream(port: int) -> None:
    """The wire-level fake upstream, lean: token ids memoised (the same history every call, as
    the gateway does) and requests not recorded. The same upstream serves every target."""
    import uvicorn

    from adapters.tokens import TokenCounter, TokenIdsMemo
    from tests.fakes.upstream import FakeUpstreamApp

    app = FakeUpstreamApp(counter=TokenCounter(TokenIdsMemo()), requests=_Unrecorded())
    uvicorn.run(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="warning", access_log=False
    )


def _peer_litellm() -> Path:
    peer = ROOT / ".venv-peer/bin/litellm"
    return peer if peer.exists() else ROOT / ".venv/bin/litellm"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--rates", default="25,50,100,200", help="offered calls/s, ascending")
    ap.add_argument("--duration-s", type=float, default=12.0, help="per target and rate")
    ap.add_argument(
        "--slices",
        type=int,
        default=12,
        help="visits each target's seconds at a rate are cut into, taken in turn (a multiple of "
        "the proxies' orders, 6 for three, gives each order equally often)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--stream", action="store_true", help="streaming calls only")
    mode.add_argument("--both", action="store_true", help="non-streaming, then streaming")
    ap.add_argument("--skip-litellm", action="store_true")
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="do not run each proxy on a core of its own (the load and the upstream on the rest)",
    )
    ap.add_argument(
        "--aiohttp-lantern",
        action="store_true",
        help="also Lantern with its upstreams on aiohttp (what its own HTTP/1.1 client earns)",
    )
    ap.add_argument(
        "--litellm-bin",
        type=Path,
        default=_peer_litellm(),
        help="the LiteLLM proxy's command (default: `make bench-peers`'s .venv-peer, else .venv's)",
    )
    ap.add_argument(
        "--previous",
        metavar="REF",
        help="also Lantern as built from this commit (e.g. the previous release), same run",
    )
    args = ap.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    rates = [float(r) for r in args.rates.split(",")]
    modes = [False, True] if args.both else [args.stream]
    split = None if args.no_pin else split_cores()
    proxy_cores = None
    if split is not None:
        proxy_cores, rest = split
        os.sched_setaffinity(0, rest)  # this load generator, and the upstream it starts
    with tempfile.TemporaryDirectory() as d, ExitStack() as builds:
        procs: list[subprocess.Popen[bytes]] = []
        try:
            litellm_bin = None if args.skip_litellm else args.litellm_bin
            targets = start_targets(Path(d), procs, litellm_bin, args.aiohttp_lantern, proxy_cores)
            if args.previous:
                tree = builds.enter_context(previous_build(args.previous, Path(d)))
                (Path(d) / "previous").mkdir()
                config = write_lantern_config(Path(d) / "previous", targets[0][1])
                proc, base = start_previous(tree, config, proxy_cores)
                procs.append(proc)
                targets.insert(2, (f"lantern@{args.previous}", base, proc.pid))
            for stream in modes:
                results = _run(sweep(targets, rates, args.duration_s, stream, args.slices))
                report(results)
        finally:
            for proc in procs:
                stop(proc)


def _run(coro: Coroutine[Any, Any, list[Result]]) -> list[Result]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def start_targets(
    tmp: Path,
    procs: list[subprocess.Popen[bytes]],
    litellm_bin: Path | None,
    aiohttp: bool,
    proxy_cores: frozenset[int] | None = None,
) -> list[Target]:
    """The fake upstream ("direct"), Lantern in front of it, Lantern with its upstreams on aiohttp
    (`aiohttp`), and LiteLLM (one worker); each proxy on `proxy_cores` when given."""
    up_port, gw_port, ll_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    fake = [PY, "-m", "bench.gateway_overhead", "--serve-upstream", str(up_port)]
    procs.append(start(fake, f"http://127.0.0.1:{up_port}/", log=tmp / "up.log"))
    targets: list[Target] = [("direct", upstream, None)]
    config = str(write_lantern_config(tmp, upstream))
    lantern = [PY, "-m", "gateway.cli.main", "serve", "--config", config, "--port", str(gw_port)]
    gw = start(
        lantern,
        f"http://127.0.0.1:{gw_port}/healthz",
        env=ENV,
        log=tmp / "gw.log",
        cores=proxy_cores,
    )
    procs.append(gw)
    targets.append(("lantern", f"http://127.0.0.1:{gw_port}/v1", gw.pid))
    if aiohttp:
        port = free_port()
        cmd = [PY, "-m", "bench.aiohttp_gateway", "--config", config, "--port", str(port)]
        aio = start(
            cmd,
            f"http://127.0.0.1:{port}/healthz",
            env=ENV,
            log=tmp / "gw-aio.log",
            cores=proxy_cores,
        )
        procs.append(aio)
        targets.append(("lantern-aiohttp", f"http://127.0.0.1:{port}/v1", aio.pid))
    if litellm_bin is not None:
        config = str(write_litellm_config(tmp, upstream))
        litellm = [str(litellm_bin), "--config", config, "--port", str(ll_port)]
        ll = start(
            [*litellm, "--num_workers", "1"],
            f"http://127.0.0.1:{ll_port}/health/liveliness",
            env=ENV,
            log=tmp / "ll.log",
            timeout_s=240,
            cores=proxy_cores,
        )
        procs.append(ll)
        targets.append(("litellm", f"http://127.0.0.1:{ll_port}/v1", ll.pid))
    return targets


async def sweep(
    targets: list[Target], rates: list[float], duration_s: float, stream: bool, slices: int = 1
) -> list[Result]:
    """Each target's `duration_s` at a rate cut into `slices` visits, taken in turn, so drift in
    the machine's load hits every target alike: the first slice of a rate goes to `direct` and
    then to each proxy in one order, the next in another, through every order of the proxies
    (with `slices` a multiple of their number of orders, each proxy follows every other and
    `direct` equally often). One visit per target and rate, the
    proxies always in one order, gave the same build 2-28 % less CPU per call in second place
    than in first (an A/A run, `--previous HEAD`). A target that failed a rate (errors or
    p99 >= 1 s) is not run at higher ones (it only gets worse)."""
    mode = "stream" if stream else "non-stream"
    results: list[Result] = []
    failed: set[str] = set()
    direct, proxies = targets[0], targets[1:]
    for rate in rates:
        live = [t for t in proxies if t[0] not in failed]
        orders = list(itertools.permutations(live))
        visits: dict[str, list[Visit]] = {name: [] for name, _, _ in [direct, *live]}
        for n in range(slices):
            for name, base, pid in [direct, *orders[n % len(orders)]]:
                turn0 = len(visits[name]) * (int(rate * duration_s / slices) + 5)
                visits[name].append(
                    await visit(base, pid, rate, duration_s / slices, stream, turn0)
                )
        for name, runs in visits.items():
            results.append(pooled_result(mode, name, rate, runs))
            print(results[-1], flush=True)
            if not results[-1].is_sustained:
                failed.add(name)
    return results


if __name__ == "__main__":
    main()
