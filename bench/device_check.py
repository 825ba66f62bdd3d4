"""One prepared GPU check of the bundled engine's Triton backend, for a session lent a CUDA device.

Llama-3-8B shape (32 layers, 4096 hidden, GQA 32/8, head dim 128, vocab 128,256) with seeded
random weights drawn on the device; every stage writes its results as it ends, so a run cut
short still reports what it measured:
0. the Triton kernel and engine tests (tests/selfhost/kernels/test_triton_*.py), compiled;
1. correctness, 4 layers at full width: greedy tokens equal HF transformers in fp32 (TF32 off)
   for mixed lengths, two chunk sizes, forced preemption and a shared-prefix burst, on Triton with
   and without CUDA graphs; bf16 logits of a mixed step against the torch reference backend;
2. timing, 32 layers, bf16: the HBM bandwidth probe; batch-1 decode against the weight-streaming
   roofline (target >= 0.7; the torch reference backend beside it); 64 concurrent requests
   against HF generate on the same device (target >= 10x); TTFT with a cached 4,000-token prefix
   (target >= 10x).
Writes $OUT/device_check.json and device_check.md (or ./). Budget: under 8 minutes on an H200.

    python bench/device_check.py                     # on the GPU
    python bench/device_check.py --device cpu --shape tiny --quick   # dry run of the logic
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import device_correctness, device_perf  # noqa: E402
from bench.device_models import SHAPES, make_backend, random_weights  # noqa: E402
from selfhost.config import ModelConfig  # noqa: E402

TRITON_TESTS = [
    "tests/selfhost/kernels/test_triton_kernels.py",
    "tests/selfhost/kernels/test_triton_engine.py",
]
BUDGET_S = 450.0


def environment(device: str) -> dict[str, object]:
    import importlib.metadata as metadata

    env: dict[str, object] = {"device": device, "torch": torch.__version__}
    for package in ("triton", "transformers"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = None
    if device == "cuda":
        env["device"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        try:
            env["driver"] = subprocess.run(
                query, capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            env["driver"] = f"unknown ({exc})"
    return env


def triton_tests() -> dict[str, object]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TRITON_TESTS]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    return {"returncode": done.returncode, "summary": done.stdout.strip().splitlines()[-1:]}


class Report:
    """The results so far, rewritten to JSON and markdown after every stage."""

    def __init__(self, out_dir: Path, started: float) -> None:
        self.out_dir, self.started = out_dir, started
        self.data: dict[str, object] = {}

    def stage(self, name: str, run: Callable[[], object], budget_s: float) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed > budget_s:
            self.data[name] = {"skipped": f"time budget: {elapsed:.0f} s spent"}
        else:
            begun = time.perf_counter()
            try:
                self.data[name] = run()
            except Exception as exc:  # noqa: BLE001 - a failed stage is a result, the rest still run
                self.data[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[{name}] {time.perf_counter() - begun:.1f} s", flush=True)
        self.data["wall_s"] = round(time.perf_counter() - self.started, 1)
        self.write()

    def write(self) -> None:
        text = json.dumps(self.data, indent=2, default=str)
        (self.out_dir / "device_check.json").write_text(text)
        lines = ["# bench/device_check.py results", ""]
        for key, value in self.data.items():
            lines += [f"## {key}", "", "```", json.dumps(value, indent=2, default=str), "```", ""]
        (self.out_dir / "device_check.md").write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    parser.add_argument("--quick", action="store_true", help="fewer tokens (smoke run)")
    args = parser.parse_args()
    device, cfg = args.device, SHAPES[args.shape]
    if device == "cuda" and not torch.cuda.is_available():
        print("device_check: no CUDA device", file=sys.stderr)
        return 2
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton kernels on CPU tensors
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir, time.perf_counter())
    report.data["environment"] = environment(device)
    report.data["shape"] = args.shape
    if device == "cuda":
        report.stage("triton_tests_compiled", triton_tests, 60)
    small = replace(cfg, num_layers=min(4, cfg.num_layers))
    num_new = 8 if args.quick else 16
    report.stage("fp32_vs_hf", lambda: device_correctness.fp32_vs_hf(small, device, num_new), 150)
    report.stage(
        "bf16_vs_reference", lambda: device_correctness.bf16_vs_reference(small, device), 200
    )
    run_timing(report, cfg, device, args.quick)
    ok = fp32_equal(report.data.get("fp32_vs_hf"))
    print(json.dumps(report.data, indent=2, default=str))
    print("device_check:", "PASS" if ok else "FAIL (fp32 greedy differs from HF, or did not run)")
    return 0 if ok else 1


def fp32_equal(results: object) -> bool:
    cases = results.values() if isinstance(results, dict) else ()
    return bool(cases) and all(isinstance(c, dict) and c.get("equal") is True for c in cases)


def run_timing(report: Report, cfg: ModelConfig, device: str, quick: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    state = random_weights(cfg, 3, device, torch.bfloat16)
    hbm = device_perf.bandwidth_probe(device) if device == "cuda" else 1e10
    report.data["hbm_copy_bytes_s"] = round(hbm)
    new = 32 if quick else 256
    sizes = (8, 64, 16) if quick else (64, 512, 128)
    prefix = 256 if quick else 4000
    fast = make_backend(cfg, state, "triton", device, torch.bfloat16)
    report.stage(
        "batch1_decode_triton", lambda: device_perf.batch1_decode(cfg, fast, device, hbm, new), 270
    )
    report.stage(
        "concurrent_vs_hf",
        lambda: device_perf.concurrent_vs_hf(cfg, fast, state, device, sizes),
        330,
    )
    report.stage(
        "cached_prefix_ttft", lambda: device_perf.cached_prefix_ttft(cfg, fast, prefix), 390
    )
    reference = make_backend(cfg, state, "reference", device, torch.bfloat16)
    report.stage(
        "batch1_decode_reference",
        lambda: device_perf.batch1_decode(cfg, reference, device, hbm, max(8, new // 4)),
        BUDGET_S - 30,
    )


if __name__ == "__main__":
    raise SystemExit(main())
