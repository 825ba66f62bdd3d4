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
import sqlite3
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
class Call:
    """One call as the client saw it; the replica comes from the gateway's ledger."""

    session: str
    began: float  # seconds since the run's first call went out
    latency: float
    prompt: int
    cached: int
    request_id: str
    replica: str = "?"


@dataclass
class Tally:
    prompt: int = 0
    cached: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    calls: list[Call] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_config(tmp: Path, urls: list[str], args: argparse.Namespace) -> Path:
    (tmp / "policies").mkdir(exist_ok=True)
    sha = hashlib.sha256(KEY.encode()).hexdigest()
    (tmp / "policies" / "bench.yaml").write_text(
        f'tenant: bench\napi_keys:\n  - {{id: k1, sha256: "{sha}"}}\n'
        "routing: {venue: selfhost_only}\n"
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
        latency = time.monotonic() - began
        tally.latencies.append(latency)
        if reply.status_code != 200:
            tally.errors += 1
            return
        body = reply.json()
        usage = body["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        tally.prompt += usage["prompt_tokens"]
        tally.cached += cached
        rid = reply.headers.get("x-lantern-request-id", "")
        tally.calls.append(
            Call(sid, began - tally.t0, latency, usage["prompt_tokens"], cached, rid)
        )
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


async def drive(url: str, sessions: int, turns: int, seed: int, stagger_s: float) -> Tally:
    """Sessions start `stagger_s` apart (each is a task at once). Before this was a flag the
    coroutines were only gathered after the loop's sleeps, so all of them started together
    (`--stagger-s 0`, every run recorded before 1 December 22:00 UTC)."""
    rng = random.Random(seed)
    system = "You are a coding agent. Tools: " + text(rng, 300)
    tally: Tally = Tally()
    forks: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(timeout=600) as client:
        tasks = []
        for i in range(sessions):
            messages = [
                {"role": "system", "content": system},
                {"role": "user", "content": "task: " + text(rng, 40)},
            ]
            if i and stagger_s > 0:
                await asyncio.sleep(stagger_s)
            tasks.append(
                asyncio.create_task(
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
            )
        await asyncio.gather(*tasks)
        while forks:
            await forks.pop()
    return tally


def attach_replicas(calls: list[Call], db: Path) -> None:
    """Each call's replica, from the gateway's ledger (sqlite; rows keyed by request id)."""
    if not db.exists():
        return
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT request_id, replica FROM usage WHERE status = 'ok'").fetchall()
    by_id = {rid: (rep or "?").rsplit(":", 1)[-1].split("/")[0] for rid, rep in rows}
    for c in calls:
        c.replica = by_id.get(c.request_id, "?")


def trace_report(calls: list[Call]) -> list[str]:
    """Per call, in order of dispatch: replica, calls already in flight there when it went out,
    cached / prompt tokens, latency; whether the session changed replica; the slowest 5 %."""
    ordered = sorted(calls, key=lambda c: c.began)
    last: dict[str, str] = {}
    rows = []
    for c in ordered:
        busy = sum(
            1 for o in ordered if o.replica == c.replica and o.began < c.began < o.began + o.latency
        )
        moved = c.session in last and last[c.session] != c.replica
        last[c.session] = c.replica
        rows.append((c, busy, moved))
    cut = sorted(c.latency for c in calls)[int(0.95 * (len(calls) - 1))] if calls else 0.0
    out = ["| t s | session | replica | in flight there | cached / prompt | latency s | moved |"]
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for c, busy, moved in rows:
        mark = " **(p95+)**" if c.latency >= cut else ""
        out.append(
            f"| {c.began:.2f} | {c.session} | {c.replica} | {busy} | {c.cached} / {c.prompt} |"
            f" {c.latency:.2f}{mark} | {'yes' if moved else ''} |"
        )
    per: dict[str, list[Call]] = {}
    for c in calls:
        per.setdefault(c.replica, []).append(c)
    for rep, cs in sorted(per.items()):
        out.append(
            f"replica {rep}: {len(cs)} calls, prompt {sum(c.prompt for c in cs)},"
            f" cached {sum(c.cached for c in cs)}, latency sum {sum(c.latency for c in cs):.1f} s"
        )
    out.append(f"session moves: {sum(1 for _, _, m in rows if m)}")
    return out


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
    cfg = write_config(tmp / strategy, urls, args)
    try:
        gw = start(
            [PY, "-m", "bench.picked_gateway", "--config", str(cfg), "--port", str(gw_port)]
            + ["--picker", strategy],
            f"http://127.0.0.1:{gw_port}/healthz",
            log=tmp / f"gw-{strategy}.log",
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
        try:
            url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
            tally = asyncio.run(drive(url, args.sessions, args.turns, args.seed, args.stagger_s))
        finally:
            stop(gw)
        attach_replicas(tally.calls, tmp / strategy / "lantern.db")
        return tally
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
    ap.add_argument(
        "--stagger-s", type=float, default=0.3, help="between session starts; 0: all at once"
    )
    ap.add_argument("--trace", action="store_true", help="every call: replica, load, cache")
    args = ap.parse_args()
    print(
        "| routing | requests | errors | prompt tokens | engine-reported cached | hit rate |"
        " latency p50 s | latency p95 s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    d = Path(tempfile.mkdtemp(prefix="fleet_e2e-"))  # kept: engine and gateway logs
    traces = []
    for strategy in ("round_robin", "lantern"):
        (d / strategy).mkdir()
        t = run(strategy, args, d)
        traces.append((strategy, t))
        lat = sorted(t.latencies)
        print(
            f"| {strategy} | {len(lat)} | {t.errors} | {t.prompt} | {t.cached} |"
            f" {t.cached / max(t.prompt, 1):.3f} | {statistics.median(lat):.2f} |"
            f" {lat[int(0.95 * (len(lat) - 1))]:.2f} |",
            flush=True,
        )
    if args.trace:
        for strategy, t in traces:
            print("\n".join(["", f"{strategy}:", *trace_report(t.calls)]), flush=True)
    print(f"logs: {d}")


if __name__ == "__main__":
    main()
