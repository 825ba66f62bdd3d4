"""Fair share under overload, from outside (issue 35's "How it is shown"): one fake replica that
serves at most 4 calls at once, 200 ms each, declared `max_in_flight: 4`, behind a real gateway
process. globex's calls alone give its p50; then acme sends 200 calls at once while globex keeps
calling one after another; then the replica fails 3 of acme's calls with a 500 and globex calls
10 more times. Prints globex's latency under the flood against alone, and every status.

    python -m bench.fair_share [--flood 200] [--gap-s 1.0]

`tests/e2e/test_fair_share.py` runs the same scenario and asserts its statuses and order.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._procs import ROOT, free_port
from tests.e2e.harness import write_config, write_policy
from tests.fakes.upstream import FakeUpstream

ACME_KEY = "lt-acme-fair-key-0001"
GLOBEX_KEY = "lt-globex-fair-key-0002"
MODEL = "gpt-4o-mini"
SLOTS, SERVICE_S = 4, 0.2


@dataclass(frozen=True)
class Reply:
    tenant: str
    tag: str
    status: int
    latency_s: float
    retry_after: str | None
    queue_ms: float | None


@dataclass
class Run:
    solo: list[Reply] = field(default_factory=list)
    flood: list[Reply] = field(default_factory=list)  # acme's
    during: list[Reply] = field(default_factory=list)  # globex's while the flood lasts
    faulted: list[Reply] = field(default_factory=list)  # acme's calls the replica failed
    after: list[Reply] = field(default_factory=list)  # globex's after the faults

    @staticmethod
    def p50(replies: list[Reply]) -> float:
        return statistics.median(r.latency_s for r in replies)


@dataclass
class Setup:
    url: str
    upstream: FakeUpstream
    log: Path


@contextmanager
def fair_share_gateway(var_dir: Path, acme_max_queue_ms: int = 5000) -> Iterator[Setup]:
    """The fake replica in this process, the gateway as users start it, two tenants."""
    (var_dir / "policies").mkdir(parents=True, exist_ok=True)
    with FakeUpstream() as upstream:
        upstream.app.max_concurrent, upstream.app.delay_s = SLOTS, SERVICE_S
        routing = {"max_queue_ms": acme_max_queue_ms}
        write_policy(var_dir / "policies", "acme", ACME_KEY, models=[MODEL], routing=routing)
        write_policy(var_dir / "policies", "globex", GLOBEX_KEY, models=[MODEL])
        backend = {
            "kind": "openai_compatible",
            "name": "replica",
            "base_url": upstream.openai_base_url,
            "model": MODEL,
            "timeout_s": 30,
            "metrics_path": None,
            "max_in_flight": SLOTS,
        }
        config = write_config(
            var_dir / "lantern.yaml",
            var_dir,
            [{"name": MODEL, "backends": [backend]}],
            fleet={"health_interval_s": 3600, "signal_interval_s": 0},
        )
        port, log = free_port(), var_dir / "gateway.log"
        argv = [sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        with open(log, "wb") as out:
            proc = subprocess.Popen([*argv, "--port", str(port)], cwd=ROOT, stdout=out, stderr=out)
        try:
            _wait_up(f"http://127.0.0.1:{port}", proc, log)
            yield Setup(f"http://127.0.0.1:{port}", upstream, log)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def _wait_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"gateway not up:\n{log.read_text()[-3000:]}")


async def call(client: httpx.AsyncClient, tenant: str, tag: str) -> Reply:
    key = ACME_KEY if tenant == "acme" else GLOBEX_KEY
    body = {"model": MODEL, "messages": [{"role": "user", "content": tag}], "max_tokens": 8}
    began = time.monotonic()
    reply = await client.post(
        "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    )
    queued = reply.headers.get("x-lantern-queue-ms")
    return Reply(
        tenant,
        tag,
        reply.status_code,
        time.monotonic() - began,
        reply.headers.get("retry-after"),
        None if queued is None else float(queued),
    )


async def scenario(url: str, upstream: FakeUpstream, flood: int = 200, gap_s: float = 1.0) -> Run:
    run = Run()
    limits = httpx.Limits(max_connections=flood + 20, max_keepalive_connections=flood + 20)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        for i in range(10):
            run.solo.append(await call(client, "globex", f"globex solo {i}"))
        acme = asyncio.gather(*(call(client, "acme", f"acme flood {i}") for i in range(flood)))
        flooding = asyncio.ensure_future(acme)
        await asyncio.sleep(0.05)  # the flood reaches the gateway first
        i = 0
        while not flooding.done():
            run.during.append(await call(client, "globex", f"globex during {i}"))
            i += 1
        run.flood = list(await flooding)
        upstream.fail_next(500, 3)
        for i in range(3):
            run.faulted.append(await call(client, "acme", f"acme faulted {i}"))
        for i in range(10):
            run.after.append(await call(client, "globex", f"globex after {i}"))
            await asyncio.sleep(gap_s)
    return run


def acme_between_globex(upstream: FakeUpstream) -> list[int]:
    """For each globex call the replica saw during the flood, how many acme calls it saw
    since the previous one: what globex waited behind."""
    counts, n = [], 0
    for r in upstream.requests:
        if r.path != "/v1/chat/completions":
            continue
        if b"acme flood" in r.body:
            n += 1
        elif b"globex during" in r.body:
            counts.append(n)
            n = 0
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=200)
    parser.add_argument("--gap-s", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, fair_share_gateway(Path(tmp)) as gw:
        run = asyncio.run(scenario(gw.url, gw.upstream, args.flood, args.gap_s))
        between = acme_between_globex(gw.upstream)
        peak = gw.upstream.app.peak_concurrent
    solo, during = Run.p50(run.solo), Run.p50(run.during)
    worst = max(r.latency_s for r in run.during)
    print(f"globex alone: p50 {solo * 1000:.0f} ms over {len(run.solo)} calls")
    print(
        f"globex under acme's flood of {args.flood}: p50 {during * 1000:.0f} ms "
        f"({during / solo:.1f}x), worst {worst * 1000:.0f} ms ({worst / solo:.1f}x), "
        f"{len(run.during)} calls, statuses {sorted({r.status for r in run.during})}"
    )
    statuses = {s: sum(r.status == s for r in run.flood) for s in {r.status for r in run.flood}}
    print(f"acme's flood: {statuses}; replica's peak concurrency {peak} (max_in_flight {SLOTS})")
    print(f"acme calls the replica served between globex's: {between}")
    print(f"acme's faulted calls: {[r.status for r in run.faulted]}")
    print(f"globex after the faults: {[r.status for r in run.after]}")


if __name__ == "__main__":
    main()
