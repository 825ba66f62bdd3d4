"""Latency and CPU that Lantern adds over calling the upstream directly, side by side with the
LiteLLM proxy (one worker each), same fake upstream, same agent-sized bodies (≈6,000 tokens + tools).

    .venv/bin/python bench/gateway_overhead.py [--rates 25,50,100,200] [--duration-s 10] [--stream]

Open-loop load: requests start on a fixed schedule whatever the replies do, so queueing shows
as latency. Reports p50/p99 per target and rate, added latency over direct, CPU ms per call of
the proxy process, and the highest rate with p99 < 1 s and no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._procs import PY, ROOT, cpu_seconds, free_port, start, stop

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
    history = " ".join(f"step {i} observed value {i * 7} and moved on." for i in range(700))
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


@dataclass
class Result:
    target: str
    rate: float
    sent: int
    errors: int
    p50_ms: float
    p99_ms: float
    cpu_ms_per_call: float


async def _one(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, object],
    headers: dict[str, str],
    stream: bool,
) -> float | None:
    began = time.perf_counter()
    try:
        if stream:
            async with client.stream("POST", url, json=body, headers=headers) as resp:
                async for _ in resp.aiter_bytes():
                    pass
                ok = resp.status_code == 200
        else:
            ok = (await client.post(url, json=body, headers=headers)).status_code == 200
    except httpx.HTTPError:
        return None
    return (time.perf_counter() - began) * 1000 if ok else None


async def run_rate(
    name: str, base: str, pid: int | None, rate: float, duration_s: float, stream: bool
) -> Result:
    headers = {"authorization": f"Bearer {KEY}"}
    url = f"{base}/chat/completions"
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=500)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        for turn in range(5):  # warm connections and caches
            await _one(client, url, agent_body(stream, turn), headers, stream)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        n = int(rate * duration_s)
        t0 = time.perf_counter()
        tasks = []
        for i in range(n):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(
                asyncio.create_task(_one(client, url, agent_body(stream, i), headers, stream))
            )
        done = await asyncio.gather(*tasks)
        cpu = (cpu_seconds(pid) - cpu0) if pid else 0.0
    lat = sorted(x for x in done if x is not None)
    errors = n - len(lat)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    return Result(name, rate, n, errors, p50, p99, cpu * 1000 / max(1, n))


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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rates", default="25,50,100,200")
    ap.add_argument("--duration-s", type=float, default=10.0)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--skip-litellm", action="store_true")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY_DISABLED": "true"}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        up_port, gw_port, ll_port = free_port(), free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        procs = {
            "upstream": start(
                [PY, "-m", "tests.fakes.upstream", "--port", str(up_port)],
                f"http://127.0.0.1:{up_port}/",
                log=tmp / "up.log",
            )
        }
        targets = [("direct", upstream, None)]
        try:
            gw = start(
                [
                    PY,
                    "-m",
                    "gateway.cli",
                    "serve",
                    "--config",
                    str(write_lantern_config(tmp, upstream)),
                    "--port",
                    str(gw_port),
                ],
                f"http://127.0.0.1:{gw_port}/healthz",
                env=env,
                log=tmp / "gw.log",
            )
            procs["lantern"] = gw
            targets.append(("lantern", f"http://127.0.0.1:{gw_port}/v1", gw.pid))
            if not args.skip_litellm:
                ll = start(
                    [
                        str(ROOT / ".venv/bin/litellm"),
                        "--config",
                        str(write_litellm_config(tmp, upstream)),
                        "--port",
                        str(ll_port),
                        "--num_workers",
                        "1",
                    ],
                    f"http://127.0.0.1:{ll_port}/health/liveliness",
                    env=env,
                    log=tmp / "ll.log",
                    timeout_s=240,
                )
                procs["litellm"] = ll
                targets.append(("litellm", f"http://127.0.0.1:{ll_port}/v1", ll.pid))
            report(asyncio.run(sweep(targets, rates, args.duration_s, args.stream)), args.stream)
        finally:
            for proc in procs.values():
                stop(proc)


async def sweep(
    targets: list[tuple[str, str, int | None]], rates: list[float], duration_s: float, stream: bool
) -> list[Result]:
    results = []
    for rate in rates:  # targets interleaved per rate, so drift in machine load hits all alike
        for name, base, pid in targets:
            results.append(await run_rate(name, base, pid, rate, duration_s, stream))
            print(results[-1], flush=True)
    return results


def report(results: list[Result], stream: bool) -> None:
    direct = {r.rate: r for r in results if r.target == "direct"}
    print(
        f"\n| target | rate/s | p50 ms | p99 ms | added p50 | added p99 | CPU ms/call | errors |  ({'stream' if stream else 'non-stream'})"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        d = direct[r.rate]
        print(
            f"| {r.target} | {r.rate:g} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.p50_ms - d.p50_ms:+.1f} | {r.p99_ms - d.p99_ms:+.1f} | {r.cpu_ms_per_call:.2f} | {r.errors} |"
        )
    for name in sorted({r.target for r in results}):
        ok = [r.rate for r in results if r.target == name and r.errors == 0 and r.p99_ms < 1000]
        print(f"highest sustainable rate ({name}): {max(ok) if ok else 0:g}/s")


if __name__ == "__main__":
    main()
