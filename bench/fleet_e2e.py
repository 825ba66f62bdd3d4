"""End to end: two bundled-engine replicas behind the real gateway, agent sessions (shared system
prompt, appended tool turns, forked sub-agents) from a concurrent client; engine-reported cached
tokens and latency with Lantern's routing against round-robin. Engines restart between runs.

    .venv/bin/python -m bench.fleet_e2e --sessions 8 --turns 6 --num-blocks 256
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._procs import PY, free_port, start, stop

KEY = "sk-fleet-e2e"
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "file",
    "line",
    "error",
    "test",
    "value",
    "config",
    "module",
    "result",
    "branch",
    "merge",
    "commit",
    "build",
    "deploy",
    "log",
    "trace",
    "span",
    "metric",
    "cache",
    "block",
    "token",
    "session",
    "replica",
]


@dataclass
class Tally:
    prompt: int = 0
    cached: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_config(tmp: Path, urls: list[str], strategy: str, args: argparse.Namespace) -> Path:
    (tmp / "policies").mkdir(exist_ok=True)
    sha = hashlib.sha256(KEY.encode()).hexdigest()
    (tmp / "policies" / "bench.yaml").write_text(
        f'tenant: bench\napi_keys:\n  - {{id: k1, sha256: "{sha}"}}\n'
        f"routing: {{venue: selfhost_only, strategy: {strategy}}}\n"
    )
    backend: dict[str, object] = {
        "kind": "selfhost",
        "name": "engine",
        "base_url": urls[0],
        "replicas": urls[1:],
        "model": "smollm2",
    }
    if args.fleet_kv_blocks:  # the bundled engine does not report its KV size
        backend["kv_capacity_blocks"] = args.fleet_kv_blocks
    if args.fleet_prefill_tok_s:
        backend["prefill_tok_s"] = args.fleet_prefill_tok_s
    cfg = tmp / "lantern.yaml"
    cfg.write_text(
        json.dumps(
            {
                "database_url": f"sqlite:///{tmp}/lantern.db",
                "policy_dir": str(tmp / "policies"),
                "var_dir": str(tmp),
                "server_secret": "bench",
                "prices": {
                    "smollm2": {"input": 0.1, "output": 0.1, "cache_read": 0.01, "cache_write": 0.1}
                },
                "fleet": {"signal_interval_s": args.signal_interval_s},
                "models": [{"name": "smollm2", "backends": [backend]}],
            }
        )
    )
    return cfg


async def session(
    client: httpx.AsyncClient,
    url: str,
    sid: str,
    messages: list[dict[str, str]],
    turns: int,
    rng: random.Random,
    tally: Tally,
    forks: list[asyncio.Task[None]],
    fork_prob: float,
) -> None:
    for _ in range(turns):
        messages.append({"role": "user", "content": "tool output: " + text(rng, 60)})
        began = time.monotonic()
        reply = await client.post(
            url,
            headers={"authorization": f"Bearer {KEY}", "x-session-id": sid},
            json={"model": "smollm2", "messages": messages, "max_tokens": 4, "temperature": 0},
        )
        tally.latencies.append(time.monotonic() - began)
        if reply.status_code != 200:
            tally.errors += 1
            return
        body = reply.json()
        usage = body["usage"]
        tally.prompt += usage["prompt_tokens"]
        tally.cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        messages.append(
            {"role": "assistant", "content": body["choices"][0]["message"]["content"] or "ok"}
        )
        if rng.random() < fork_prob:
            child = list(messages) + [{"role": "user", "content": "sub-task: " + text(rng, 20)}]
            forks.append(
                asyncio.create_task(
                    session(
                        client,
                        url,
                        f"{sid}-fork{len(forks)}",
                        child,
                        2,
                        random.Random(rng.random()),
                        tally,
                        forks,
                        0.0,
                    )
                )
            )
        await asyncio.sleep(rng.expovariate(1 / 0.5))  # the tool runs


async def drive(url: str, sessions: int, turns: int, seed: int) -> Tally:
    rng = random.Random(seed)
    system = "You are a coding agent. Tools: " + text(rng, 300)
    tally, forks = Tally(), []
    async with httpx.AsyncClient(timeout=600) as client:
        tasks = []
        for i in range(sessions):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": "task: " + text(rng, 40)},
            ]
            tasks.append(
                session(
                    client,
                    url,
                    f"s{seed}-{i}",
                    messages,
                    turns,
                    random.Random(rng.random()),
                    tally,
                    forks,
                    0.2,
                )
            )
            await asyncio.sleep(0.3)
        await asyncio.gather(*tasks)
        while forks:
            await forks.pop()
    return tally


def run(strategy: str, args: argparse.Namespace, tmp: Path) -> Tally:
    ports = [free_port() for _ in range(2)]
    engines = [
        start(
            [
                PY,
                "-m",
                "selfhost",
                "--port",
                str(p),
                "--num-blocks",
                str(args.num_blocks),
                "--threads",
                "1",
                "--served-model-name",
                "smollm2",
            ],
            f"http://127.0.0.1:{p}/health",
            timeout_s=300,
            log=tmp / f"engine{p}.log",
        )
        for p in ports
    ]
    gw_port = free_port()
    urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
    cfg = write_config(tmp / strategy, urls, strategy, args)
    try:
        gw = start(
            [PY, "-m", "gateway.cli", "serve", "--config", str(cfg), "--port", str(gw_port)],
            f"http://127.0.0.1:{gw_port}/healthz",
            log=tmp / f"gw-{strategy}.log",
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
        try:
            url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
            return asyncio.run(drive(url, args.sessions, args.turns, args.seed))
        finally:
            stop(gw)
    finally:
        for e in engines:
            stop(e)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--num-blocks", type=int, default=256, help="KV blocks per engine replica")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--fleet-kv-blocks", type=int, default=0, help="kv_capacity_blocks in the gateway config"
    )
    ap.add_argument(
        "--fleet-prefill-tok-s", type=float, default=0, help="prefill_tok_s in the gateway config"
    )
    ap.add_argument(
        "--signal-interval-s", type=float, default=1.0, help="engine /metrics cadence; 0: off"
    )
    args = ap.parse_args()
    print(
        "| routing | requests | errors | prompt tokens | engine-reported cached | hit rate |"
        " latency p50 s | latency p95 s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    d = Path(tempfile.mkdtemp(prefix="fleet_e2e-"))  # kept: engine and gateway logs
    for strategy in ("round_robin", "lantern"):
        (d / strategy).mkdir()
        t = run(strategy, args, d)
        lat = sorted(t.latencies)
        print(
            f"| {strategy} | {len(lat)} | {t.errors} | {t.prompt} | {t.cached} |"
            f" {t.cached / max(t.prompt, 1):.3f} | {statistics.median(lat):.2f} |"
            f" {lat[int(0.95 * (len(lat) - 1))]:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
