"""Per-call cost of admission (reserve + settle) on Lantern's memory and Redis quota stores, side
by side with LiteLLM's v3 rate limiter pre-call check on the same Redis; the calls per second one
Redis sustains with N gateway processes; and the overrun check under that load.

    .venv/bin/python -m bench.quota_overhead [--calls 2000] [--duration-s 5] [--processes 4]

Runs its own redis-server on a free port (no other traffic in the command counts). Wall time per
call is this process's view (event loop + network); Redis CPU per call is read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from bench._procs import cpu_seconds, free_port
from quotas.errors import QuotaExceeded
from quotas.limits import Actual, Ask, Limits
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore

WIDE = Limits(
    tokens_per_minute=10**12,
    requests_per_minute=10**9,
    concurrent_requests=10**6,
    calls_per_session=10**9,
    monthly_budget_usd=10**9,
)


def now_ms() -> int:
    return int(time.time() * 1000)


def start_redis(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    proc = subprocess.Popen(
        [*argv, "--appendonly", "no", "--dir", directory], stdout=subprocess.DEVNULL
    )
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


def commands_processed(port: int) -> int:
    return int(redis.Redis(port=port).info("stats")["total_commands_processed"])


def summary(samples_us: list[float]) -> dict[str, float]:
    ordered = sorted(samples_us)
    return {
        "p50_us": round(statistics.median(ordered), 1),
        "p99_us": round(ordered[int(len(ordered) * 0.99) - 1], 1),
        "mean_us": round(statistics.fmean(ordered), 1),
    }


async def time_calls(call: Callable[[int], Awaitable[None]], n: int) -> tuple[list[float], float]:
    for i in range(min(100, n)):
        await call(-1 - i)  # warm-up: connections, script cache, imports
    samples, cpu0 = [], time.process_time()
    for i in range(n):
        t0 = time.perf_counter_ns()
        await call(i)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples, (time.process_time() - cpu0) / n * 1e6


async def lantern_sequential(store: QuotaStore, n: int, tag: str) -> tuple[list[float], float]:
    async def call(i: int) -> None:
        ask = Ask(1100, 0.002, session_id="s")
        held = await store.reserve("bench", WIDE, ask, reservation_id=f"{tag}{i}", now_ms=now_ms())
        await store.settle(held, Actual(900, 0.0015), now_ms=now_ms())

    return await time_calls(call, n)


def litellm_limiter(port: int) -> tuple[Any, Any]:
    """LiteLLM's own v3 limiter on our Redis, its proxy-wide lookups stubbed out."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.caching.dual_cache import DualCache
    from litellm.caching.redis_cache import RedisCache
    from litellm.proxy.hooks.parallel_request_limiter_v3 import (
        _PROXY_MaxParallelRequestsHandler_v3 as Limiter,
    )
    from litellm.proxy.utils import InternalUsageCache

    async def no_tags(names: Any) -> dict[str, Any]:
        return {}

    cache = DualCache(redis_cache=RedisCache(host="127.0.0.1", port=port))
    limiter = Limiter(
        internal_usage_cache=InternalUsageCache(dual_cache=cache),
        tag_rate_limit_resolver=no_tags,
        model_group_resolver=lambda model: None,
        ptu_team_ceiling_resolver=lambda team, model: None,
        fail_closed_resolver=lambda: False,
        force_hash_tag_grouping_resolver=lambda: False,
    )
    return limiter, cache


def litellm_key(name: str, tpm: int, rpm: int | None = None) -> Any:
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(api_key=name, tpm_limit=tpm, rpm_limit=rpm)


async def litellm_sequential(port: int, n: int) -> tuple[list[float], float]:
    """LiteLLM's own pre-call limiter (reserves estimated tokens; its settle runs in a logging
    callback after the response and is not timed here)."""
    limiter, cache = litellm_limiter(port)
    key = litellm_key("bench-key-hash", tpm=10**12, rpm=10**9)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}

    async def call(i: int) -> None:
        data = {**body, "max_tokens": 100}
        await limiter.async_pre_call_hook(
            user_api_key_dict=key, cache=cache, data=data, call_type="completion"
        )

    return await time_calls(call, n)


def litellm_overrun_worker(port: int, key_name: str, calls: int, start: Any, out: Any) -> None:
    """One process firing `calls` concurrent pre-call checks (max_tokens 1,000) at one key."""

    async def main() -> tuple[int, int]:
        limiter, cache = litellm_limiter(port)
        key = litellm_key(key_name, tpm=50_000)
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        reserved = limiter._estimate_tokens_for_request({**body, "max_tokens": 1000})
        start.wait()  # every process set up: fire together

        async def one(i: int) -> int:
            try:
                await limiter.async_pre_call_hook(
                    user_api_key_dict=key,
                    cache=cache,
                    data={**body, "max_tokens": 1000},
                    call_type="completion",
                )
            except Exception:  # noqa: BLE001 - LiteLLM signals a limit with HTTPException(429)
                return 0
            return 1

        admitted = sum(await asyncio.gather(*(one(i) for i in range(calls))))
        return admitted, reserved

    out.put(asyncio.run(main()))


def sequential_rows(port: int, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs: list[tuple[str, Callable[[], Awaitable[tuple[list[float], float]]]]] = [
        (
            "lantern memory store: reserve + settle",
            lambda: lantern_sequential(MemoryQuotaStore(), n, "m"),
        ),
        (
            "lantern Redis store: reserve + settle",
            lambda: lantern_sequential(
                RedisQuotaStore.from_url(f"redis://127.0.0.1:{port}/0"), n, "r"
            ),
        ),
        ("LiteLLM v3 limiter: pre-call check only", lambda: litellm_sequential(port, n)),
    ]
    for name, run in runs:
        before = commands_processed(port)
        try:
            samples, cpu_us = asyncio.run(run())
        except ImportError as exc:
            rows.append({"what": name, "error": f"not installed: {exc}"})
            continue
        per_call = (commands_processed(port) - before - 1) / (n + min(100, n))
        rows.append(
            {
                "what": name,
                **summary(samples),
                "client_cpu_us": round(cpu_us, 1),
                "redis_commands_per_call": round(per_call, 2),
            }
        )
    return rows


def load_worker(port: int, duration_s: float, concurrency: int, start: Any, out: Any) -> None:
    """One gateway-like process: `concurrency` calls in flight, reserve then settle, until time."""

    async def main() -> int:
        store = RedisQuotaStore.from_url(f"redis://127.0.0.1:{port}/0")
        done, pid = 0, os.getpid()
        start.wait()  # every process set up: fire together
        end = time.time() + duration_s

        async def loop(w: int) -> None:
            nonlocal done
            i = 0
            while time.time() < end:
                i += 1
                held = await store.reserve(
                    "bench",
                    WIDE,
                    Ask(1100, 0.002),
                    reservation_id=f"{pid}-{w}-{i}",
                    now_ms=now_ms(),
                )
                await store.settle(held, Actual(900, 0.0015), now_ms=now_ms())
                done += 1

        await asyncio.gather(*(loop(w) for w in range(concurrency)))
        await store.close()
        return done

    out.put(asyncio.run(main()))


def overrun_worker(port: int, tenant: str, calls: int, start: Any, out: Any) -> None:
    """One process firing `calls` concurrent 1,000-token reservations at one tenant."""
    limits = Limits(tokens_per_minute=50_000)

    async def main() -> int:
        store = RedisQuotaStore.from_url(f"redis://127.0.0.1:{port}/0", timeout_s=5.0)
        start.wait()  # every process set up: fire together

        async def one(i: int) -> int:
            try:
                await store.reserve(
                    tenant, limits, Ask(1000), reservation_id=f"{os.getpid()}-{i}", now_ms=now_ms()
                )
            except QuotaExceeded:
                return 0
            return 1000

        admitted = sum(await asyncio.gather(*(one(i) for i in range(calls))))
        await store.close()
        return admitted

    out.put(asyncio.run(main()))


def run_processes(
    target: Any, args_for: Callable[[Any, Any], tuple[Any, ...]], count: int
) -> list[Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = ctx.Barrier(count)  # released once every process has imported and connected
    procs = [ctx.Process(target=target, args=args_for(start, out)) for _ in range(count)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, port = start_redis(tmp)
        try:
            report = measure(port, server.pid, args)
        finally:
            server.terminate()
            server.wait()
    print(json.dumps(report, indent=2))


def measure(port: int, redis_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    rows = sequential_rows(port, args.calls)
    before_cmds, before_cpu = commands_processed(port), cpu_seconds(redis_pid)
    calls = run_processes(
        load_worker,
        lambda start, out: (port, args.duration_s, args.concurrency, start, out),
        args.processes,
    )
    total = sum(calls)
    redis_cpu_us = (cpu_seconds(redis_pid) - before_cpu) / max(total, 1) * 1e6
    admitted = run_processes(
        overrun_worker,
        lambda start, out: (port, "overrun", 400 // args.processes, start, out),
        args.processes,
    )
    peer = run_processes(
        litellm_overrun_worker,
        lambda start, out: (port, "overrun-key", 400 // args.processes, start, out),
        args.processes,
    )
    return {
        "sequential": rows,
        "load": {
            "processes": args.processes,
            "concurrency_per_process": args.concurrency,
            "duration_s": args.duration_s,
            "calls_per_s": round(total / args.duration_s),
            "per_process": calls,
            "redis_cpu_us_per_call": round(redis_cpu_us, 1),
            "redis_commands_per_call": round(
                (commands_processed(port) - before_cmds) / max(total, 1), 2
            ),
        },
        "overrun": {
            "calls": 400 // args.processes * args.processes,
            "tokens_per_call": 1000,
            "limit_tokens": 50_000,
            "admitted_tokens": sum(admitted),
            "per_process": admitted,
            "litellm_v3_admitted_calls": sum(calls for calls, _ in peer),
            "litellm_v3_reserved_tokens_per_call": peer[0][1],
            "litellm_v3_admitted_tokens": sum(calls * tokens for calls, tokens in peer),
            "litellm_v3_per_process": [calls for calls, _ in peer],
        },
    }


if __name__ == "__main__":
    main()
