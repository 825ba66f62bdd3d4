"""Batch-1 decode against the read bandwidth measured while it runs (bench/engine.py, issue 3).

The shared machine's bandwidth swings by 2x minutes apart, so a roofline against one reading
before or after the whole run says little. Here probe windows and batch-1 decode windows
alternate (probe, decode, probe, ..., decode, probe), each decode paired with the mean of the
probe windows either side of it, with the same thread count and OMP settings. Two probes per
window: torch's fp32 sum of a 1 GiB buffer and a GEMV over a 1 GiB bf16 matrix with the engine's
own kernel (where it builds). Measures, never asserts.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bench.engine_http import Target, run_one
from selfhost.kernels.cpu.loader import load_cpu_kernels, pack_weight

PROBE_BYTES = 1 << 30  # far larger than the last-level cache (32 MiB L3 on this machine)
GEMV_K = 512  # input width of the GEMV probe's matrix: [PROBE_BYTES / 2 / K, K] bf16


class Probes:
    """The read probes of one process: buffers allocated and faulted in once."""

    def __init__(self, num_bytes: int = PROBE_BYTES) -> None:
        self.num_bytes = num_bytes
        self.buffer = torch.ones(num_bytes // 4, dtype=torch.float32)
        self.buffer.sum()
        self.kernels = load_cpu_kernels()
        self.gemv: Callable[[], object] | None = None
        if self.kernels is not None:
            rows = num_bytes // 2 // GEMV_K
            weight = pack_weight(torch.full((rows, GEMV_K), 0.01, dtype=torch.bfloat16))
            x = torch.ones(1, GEMV_K, dtype=torch.bfloat16)
            self.gemv = lambda: self.kernels.linear(x, weight, rows, "none", None, 0.0, None)
            self.gemv()

    def window(self, seconds: float) -> ProbeWindow:
        """Each probe repeated for about `seconds` / 2; every repeat's bytes/s."""
        found = ProbeWindow(_repeat(self.buffer.sum, self.num_bytes, seconds / 2))
        if self.gemv is not None:
            found.gemv = _repeat(self.gemv, self.num_bytes, seconds / 2)
        return found


def _repeat(probe: Callable[[], object], num_bytes: int, seconds: float) -> list[float]:
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while not rates or time.perf_counter() < deadline:
        started = time.perf_counter()
        probe()
        rates.append(num_bytes / (time.perf_counter() - started))
    return rates


@dataclass
class ProbeWindow:
    sum: list[float]  # bytes/s of each torch.sum repeat
    gemv: list[float] = field(default_factory=list)  # bytes/s of each kernel GEMV repeat

    def median(self, kind: str) -> float:
        rates = self.sum if kind == "sum" else self.gemv
        return statistics.median(rates) if rates else 0.0


@dataclass
class PairedRoofline:
    weight_bytes: int
    probes: list[ProbeWindow] = field(default_factory=list)  # n + 1 windows around n decodes
    decode_tok_s: list[float] = field(default_factory=list)

    def ratios(self, kind: str = "sum") -> list[float]:
        """Per decode window: weight bytes x decode rate / mean of the probe medians either side."""
        out = []
        for i, rate in enumerate(self.decode_tok_s):
            around = (self.probes[i].median(kind) + self.probes[i + 1].median(kind)) / 2
            out.append(self.weight_bytes * rate / around if around else 0.0)
        return out

    def best_probe(self, kind: str = "sum") -> float:
        rates = [r for w in self.probes for r in (w.sum if kind == "sum" else w.gemv)]
        return max(rates, default=0.0)

    def conservative_ratio(self, kind: str = "sum") -> float:
        """Median decode rate against the single best probe reading of all windows."""
        best = self.best_probe(kind)
        rate = statistics.median(self.decode_tok_s) if self.decode_tok_s else 0.0
        return self.weight_bytes * rate / best if best else 0.0


def measure_paired(
    target: Target,
    prompt: Callable[[], list[int]],
    weight_bytes: int,
    pairs: int = 5,
    probe_s: float = 1.0,
    decode_tokens: int = 200,
) -> PairedRoofline:
    """`pairs` decode windows of `decode_tokens` greedy tokens (one request each, a fresh prompt
    from `prompt`), with a probe window of `probe_s` before the first and after each."""
    probes = Probes()
    found = PairedRoofline(weight_bytes)
    found.probes.append(probes.window(probe_s))
    for _ in range(pairs):
        done = asyncio.run(run_one(target, prompt(), decode_tokens))
        found.decode_tok_s.append(done.decode_tok_s)
        found.probes.append(probes.window(probe_s))
    return found


def paired_lines(paired: PairedRoofline) -> list[str]:
    """The report's section: every window, then the per-pair ratios and the conservative one."""
    lines = [
        "| window | torch.sum GB/s (median / best) | kernel GEMV GB/s (median / best) |"
        " batch-1 decode tok/s after it |",
        "|---|---|---|---|",
    ]
    for i, window in enumerate(paired.probes):
        gemv = (
            f"{window.median('gemv') / 1e9:.1f} / {max(window.gemv) / 1e9:.1f}"
            if window.gemv
            else "n/a (no kernels)"
        )
        rate = f"{paired.decode_tok_s[i]:.1f}" if i < len(paired.decode_tok_s) else "–"
        lines.append(
            f"| probe {i} | {window.median('sum') / 1e9:.1f} / {max(window.sum) / 1e9:.1f}"
            f" | {gemv} | {rate} |"
        )
    lines.append("")
    for kind, name in (("sum", "torch.sum"), ("gemv", "kernel GEMV")):
        ratios = paired.ratios(kind)
        if not any(ratios):
            continue
        lines.append(
            f"- against the {name} probe: per-pair ratios"
            f" {', '.join(f'{r:.2f}' for r in ratios)}; median **{statistics.median(ratios):.2f}**"
            f" (range {min(ratios):.2f}–{max(ratios):.2f}); median decode rate against the best"
            f" single {name} reading of all windows ({paired.best_probe(kind) / 1e9:.1f} GB/s):"
            f" {paired.conservative_ratio(kind):.2f} (conservative)"
        )
    return lines
