"""Scale-out benchmarks, side by side in one run:

1. Sustained rate of `lantern serve --workers 1` and `--workers 2` in front of the same fake
   upstream (open-loop sweep, `bench.gateway_overhead.run_rate`, the ≈6,000-token agent call;
   sustained = no errors and p99 < 1 s). Targets are interleaved per rate.
2. The added latency of the shared affinity lookup: the admission step as the pipeline makes
   it (the quota reservation on Redis, and with sharing the recall of the session's affinity
   at the same time), with sharing against without; the recall alone and a PING for scale.

    python -m bench.scaleout --redis redis://127.0.0.1:6379/0 [--rates 50,100,...] [--lookups-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

from bench._procs import PY, free_port, start, stop
from bench.gateway_overhead import ENV, _run, run_rate, write_lantern_config
from bench.overhead_results import Result

Target = tuple[str, str, int]


def start_gateways(tmp: Path, redis_url: str, procs: list) -> list[Target]:  # type: ignore[type-arg]
    up_port = free_port()
    fake = [PY, "-m", "bench.gateway_overhead", "--serve-upstream", str(up_port)]
    procs.append(start(fake, f"http://127.0.0.1:{up_port}/", log=tmp / "up.log"))
    config = write_lantern_config(tmp, f"http://127.0.0.1:{up_port}/v1")
    doc = json.loads(config.read_text())
    doc["redis_url"] = redis_url
    doc["fleet"] = {"shared_key_prefix": f"bench-scaleout:{uuid.uuid4().hex[:8]}:"}
    config.write_text(json.dumps(doc))
    targets: list[Target] = []
    for workers in (1, 2):
        port = free_port()
        argv = [PY, "-m", "gateway.cli.main", "serve", "--config", str(config)]
        argv += ["--port", str(port), "--workers", str(workers)]
        log = tmp / f"gw{workers}.log"
        gw = start(argv, f"http://127.0.0.1:{port}/ready", env=ENV, log=log, timeout_s=240)
        procs.append(gw)
        targets.append((f"workers={workers}", f"http://127.0.0.1:{port}/v1", gw.pid))
    return targets


async def sweep(targets: list[Target], rates: list[float], duration_s: float) -> list[Result]:
    results: list[Result] = []
    failed: set[str] = set()
    for rate in rates:
        for name, base, pid in targets:
            if name in failed:
                continue
            r = await run_rate(name, base, pid, rate, duration_s, stream=False)
            results.append(r)
            print(
                f"{name:10} {rate:6.0f}/s  errors {r.errors:4d}  p50 {r.p50_ms:7.1f} ms  "
                f"p99 {r.p99_ms:7.1f} ms  cpu/call {r.cpu_ms_per_call:5.2f} ms",
                flush=True,
            )
            if not r.is_sustained:
                failed.add(name)
    return results


def sustained(results: list[Result], name: str) -> float:
    return max((r.rate for r in results if r.target == name and r.is_sustained), default=0.0)


class Lookup(NamedTuple):
    """p50 and p99 (ms) of the admission step with sharing and without, the added p50, the
    lookup alone (`Fleet.recall`) and a bare Redis PING on the affinity pool (one round trip)."""

    shared_p50: float
    shared_p99: float
    local_p50: float
    local_p99: float
    recall_p50: float
    ping_p50: float

    @property
    def added_p50(self) -> float:
        return self.shared_p50 - self.local_p50


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


async def affinity_lookup(redis_url: str, n: int) -> Lookup:
    """The admission step of a call, as the pipeline makes it (`reserve_recalling`: the quota
    reservation on Redis with the shared affinity's recall at the same time), with sharing and
    without (the reservation alone), interleaved over `n` calls of sessions that have a shared
    entry; then `Fleet.recall` alone and a PING, for scale."""
    from adapters.types import Usage
    from gateway.core.admission import Admission
    from gateway.core.reserve_recall import reserve_recalling
    from gateway.fleet.affinity_store import Placement
    from gateway.fleet.routing_port import Fleet
    from gateway.fleet.sharing import FleetSharing
    from gateway.ports import Candidate, ModelRoute
    from policies.limits import LimitsPolicy
    from policies.model import TenantPolicy
    from quotas.redis_store import RedisQuotaStore

    route = ModelRoute("m", (Candidate(None, "b", "selfhost", "http://a"),))  # type: ignore[arg-type]
    fleet = Fleet([route], clock=time.monotonic, rng=random.Random(0))
    prefix = f"bench-scaleout:{uuid.uuid4().hex[:8]}:"
    sharing = FleetSharing.from_url(
        redis_url,
        sessions=fleet.registry.sessions,
        index=lambda: fleet.index,
        clock=time.monotonic,
        key_prefix=prefix,
    )
    admission = Admission(RedisQuotaStore.from_url(redis_url, key_prefix=prefix + "quota:"))
    tenant = TenantPolicy(tenant="t", limits=LimitsPolicy(tokens_per_minute=10**12))
    store = sharing.affinity.store
    for i in range(100):
        await store.commit(
            "t",
            f"s{i}",
            Placement("selfhost", "b", "b@http://a"),
            expected_version=0,
            cached_tokens=1000,
            seen_ms=int(time.time() * 1000),
        )
    timings: dict[bool, list[float]] = {True: [], False: []}
    recalls: list[float] = []
    pings: list[float] = []
    for i in range(n):
        for shared in (True, False):
            fleet.sharing = sharing if shared else None
            t0 = time.perf_counter()
            ticket = await reserve_recalling(
                admission,
                fleet,
                tenant,
                f"s{i % 100}",
                budget_session=None,
                prompt_tokens=6000,
                max_tokens=200,
                worst_case_usd=0.0,
            )
            timings[shared].append((time.perf_counter() - t0) * 1000)
            await admission.settle(ticket, usage=Usage(6000, 200), cost_usd=0.0)
        fleet.sharing = sharing
        t0 = time.perf_counter()
        await fleet.recall("t", f"s{i % 100}")
        recalls.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await store.redis.ping()
        pings.append((time.perf_counter() - t0) * 1000)
    keys = [k async for k in store.redis.scan_iter(match=prefix + "*")]
    if keys:
        await store.redis.delete(*keys)
    await sharing.stop()
    await admission.aclose()
    on, off = timings[True], timings[False]
    return Lookup(
        _p(on, 0.5), _p(on, 0.99), _p(off, 0.5), _p(off, 0.99), _p(recalls, 0.5), _p(pings, 0.5)
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--rates", default="100,150,200,250,300,350,400,500,600")
    ap.add_argument("--duration-s", type=float, default=5.0)
    ap.add_argument("--lookups", type=int, default=5000)
    ap.add_argument("--lookups-only", action="store_true", help="skip the workers sweep")
    args = ap.parse_args()
    lk = asyncio.run(affinity_lookup(args.redis, args.lookups))
    print(
        f"admission step (quota reservation + affinity recall): shared p50 {lk.shared_p50:.3f} ms"
        f" p99 {lk.shared_p99:.3f} ms; without sharing p50 {lk.local_p50:.3f} ms"
        f" p99 {lk.local_p99:.3f} ms; added p50 {lk.added_p50:.3f} ms; the recall alone p50"
        f" {lk.recall_p50:.3f} ms; Redis PING p50 {lk.ping_p50:.3f} ms",
        flush=True,
    )
    if args.lookups_only:
        return
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as d:
        procs: list = []  # type: ignore[type-arg]
        try:
            targets = start_gateways(Path(d), args.redis, procs)
            results = _run(sweep(targets, rates, args.duration_s))
        finally:
            for proc in procs:
                stop(proc)
    one, two = sustained(results, "workers=1"), sustained(results, "workers=2")
    ratio = two / one if one else float("nan")
    print(f"sustained: workers=1 {one:.0f}/s, workers=2 {two:.0f}/s, ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
