"""Where a decode step of Lantern's engine spends its time: torch.profiler over a few steps at a
given batch size, in process, after the prompts are prefilled, and (on the CPU fast path, whose
kernels torch.profiler sees only as engine.step self time) wall time per kernel. Prints tables;
never asserts.

    .venv/bin/python -m bench.engine_profile [--batch 1] [--steps 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.engine_layers import PerLayerCpuBackend
from selfhost.builder import build_engine, default_dtype
from selfhost.config import EngineConfig
from selfhost.engine import model_runner
from selfhost.engine.sequence import SamplingParams
from selfhost.kernels.cpu.backend import CpuKernelBackend
from selfhost.kernels.cpu.module import CpuKernelModule


def prefilled_engine(args: argparse.Namespace):  # noqa: ANN201 - selfhost's LLMEngine
    engine = build_engine(
        EngineConfig(dtype=args.dtype, num_threads=args.threads, num_blocks=args.num_blocks)
    )
    params = SamplingParams(temperature=0.0, max_tokens=2048, ignore_eos=True)
    for index in range(args.batch):
        prompt = [(1000 + 37 * index + 11 * pos) % 40_000 + 100 for pos in range(args.prompt)]
        engine.add_request(f"profile-{index}", prompt, params)
    while engine.scheduler.waiting or any(
        seq.num_computed_tokens < seq.num_tokens - 1 for seq in engine.scheduler.running
    ):
        engine.step()
    for _ in range(3):  # warm-up decodes
        engine.step()
    return engine


def step_phases(engine, steps: int) -> dict[str, float]:  # noqa: ANN001
    """Milliseconds per step in schedule, prepare, forward (+ logits), sample + bookkeeping."""
    totals = {"schedule": 0.0, "prepare": 0.0, "forward": 0.0, "rest": 0.0}
    runner = engine.runner
    prepare = getattr(runner, "prepare", None) or (
        lambda out: model_runner.prepare_step(out, runner.block_size, runner.device)
    )
    for _ in range(steps):
        t0 = time.perf_counter()
        out = engine.scheduler.schedule()
        t1 = time.perf_counter()
        inputs = prepare(out)
        t2 = time.perf_counter()
        with torch.inference_mode():
            hidden = runner.model(inputs.input_ids, inputs.positions, runner.kv_cache, inputs.meta)
            logits = runner.model.compute_logits(hidden[inputs.sample_rows])
        t3 = time.perf_counter()
        engine.scheduler.update_after_step(out)
        seqs = [item.seq for item in inputs.sampled]
        tokens = engine.sampler.sample(
            logits, [s.request_id for s in seqs], [s.params for s in seqs]
        )
        for seq, token in zip(seqs, tokens, strict=True):
            seq.token_ids.append(token.token_id)
        t4 = time.perf_counter()
        for key, span in zip(totals, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            totals[key] += span * 1000 / steps
    return totals


class TimedKernels:
    """The CPU kernels module with wall time per kernel (linears keyed by output rows)."""

    def __init__(self, kernels: CpuKernelModule) -> None:
        self.kernels = kernels
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def __getattr__(self, name: str) -> Callable[..., object]:
        kernel = getattr(self.kernels, name)

        def timed(*args: object) -> object:
            key = f"linear N={args[2]}" if name == "linear" else name
            started = time.perf_counter()
            result = kernel(*args)
            self.seconds[key] += time.perf_counter() - started
            self.calls[key] += 1
            return result

        return timed


def kernel_table(engine, steps: int) -> str:  # noqa: ANN001
    """ms per step in each CPU kernel over `steps` decode steps ('' when the kernels are off)."""
    model = engine.runner.model
    engine_backend = model.backend
    if not isinstance(engine_backend, CpuKernelBackend):
        return ""
    timed = TimedKernels(engine_backend.kernels)
    model.backend = PerLayerCpuBackend(engine_backend, timed)  # type: ignore[arg-type]
    started = time.perf_counter()
    try:
        for _ in range(steps):
            engine.step()
    finally:
        model.backend = engine_backend
    step_ms = (time.perf_counter() - started) * 1000 / steps
    rows = sorted(timed.seconds.items(), key=lambda item: -item[1])
    lines = [f"CPU kernels, {step_ms:.1f} ms per step (timed):"]
    lines += [
        f"  {key:<18} {seconds * 1000 / steps:6.2f} ms  {timed.calls[key] // steps:3d} calls"
        for key, seconds in rows
    ]
    other = step_ms - sum(timed.seconds.values()) * 1000 / steps
    return "\n".join([*lines, f"  {'outside kernels':<18} {other:6.2f} ms"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dtype", default=default_dtype("cpu"))
    parser.add_argument("--num-blocks", type=int, default=1024)
    args = parser.parse_args(argv)
    engine = prefilled_engine(args)
    started = time.perf_counter()
    for _ in range(args.steps):
        engine.step()
    step_ms = (time.perf_counter() - started) * 1000 / args.steps
    print(f"batch {args.batch}: {step_ms:.1f} ms per decode step (engine.step, unprofiled)")
    try:
        phases = step_phases(engine, args.steps)
        print("phases (ms/step): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    except (AttributeError, TypeError) as exc:  # the engine's internals moved on
        print(f"phases unavailable: {exc!r}")
    print(kernel_table(engine, args.steps))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            with record_function("engine.step"):
                engine.step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
