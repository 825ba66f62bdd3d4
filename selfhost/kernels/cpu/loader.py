"""The CPU fast path's kernels (csrc/*.cpp), compiled on first use.

Two builds of the same entry points: AVX512 with BF16 dot products (cpu_linear.cpp,
cpu_attention.cpp) and AVX2 + FMA (linear_avx2.cpp, attention_avx2.cpp) for CPUs without them.
`load_cpu_kernels()` builds the one this CPU runs with torch's C++ extension loader (g++, ninja) when the engine
starts, never at import; where that is impossible it logs one line and returns None, and the engine
runs the torch reference path. Packing of weights for the kernels lives here too.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import cast

import torch

from selfhost.kernels.cpu.module import CpuKernelModule, Prologue

log = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = {
    "avx512_bf16": (
        "cpu_module.cpp",
        "cpu_linear.cpp",
        "cpu_attention.cpp",
        "cpu_rope.cpp",
        "cpu_forward.cpp",
        "cpu_sample.cpp",
    ),
    "avx2": (
        "cpu_module.cpp",
        "linear_avx2.cpp",
        "attention_avx2.cpp",
        "cpu_rope.cpp",
        "cpu_forward.cpp",
        "cpu_sample.cpp",
    ),
}
GROUP_ROWS = 64  # output rows per packed group (cpu_linear.cpp kGroup)
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
# torch's build lock (a file) is left behind by a process killed while compiling, and the next
# start waits on it forever; a build takes seconds to minutes, so a lock this old is nobody's
STALE_LOCK_S = 20 * 60


def load_cpu_kernels(
    build_dir: Path | None = None, isa: str | None = None
) -> CpuKernelModule | None:
    """The compiled kernels for `isa` (default: the best this CPU runs), or None (with one log
    line) when they cannot be built or run here."""
    if isa is not None and isa not in SOURCES:
        raise ValueError(f"unknown kernel ISA {isa!r}; expected one of {sorted(SOURCES)}")
    isa = isa or best_isa()
    if isa is None or isa not in supported_isas():
        log.warning("CPU fast path off: this CPU has neither AVX512-BF16 nor AVX2 (torch path)")
        return None
    if shutil.which("ninja") is None or shutil.which("c++") is None:
        log.warning("CPU fast path off: no ninja or C++ compiler on PATH (torch reference path)")
        return None
    from torch.utils import cpp_extension

    kwargs: dict[str, object] = {}
    name = f"lantern_cpu_kernels_{isa}_{_source_digest()}"
    if build_dir is not None:
        build_dir.mkdir(parents=True, exist_ok=True)
        kwargs["build_directory"] = str(build_dir)
    clear_stale_lock(build_dir or Path(cpp_extension._get_build_directory(name, False)))
    try:
        module = cpp_extension.load(
            name=name,
            sources=[str(CSRC / name) for name in SOURCES[isa]],
            extra_cflags=CFLAGS,
            extra_ldflags=["-fopenmp"],
            **kwargs,  # type: ignore[arg-type]
        )
        _smoke_test(module)
    except Exception as exc:  # noqa: BLE001 - any build or CPU failure means: reference path
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("CPU fast path off: kernels unavailable (%s); torch reference path", first)
        return None
    return cast(CpuKernelModule, module)


def clear_stale_lock(build_dir: Path, now: float | None = None) -> bool:
    """Remove the build lock a killed build left (older than `STALE_LOCK_S`); True if removed."""
    lock = build_dir / "lock"
    try:
        age_s = (time.time() if now is None else now) - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age_s < STALE_LOCK_S:
        return False
    log.warning("removing a stale kernel build lock (%.0f s old): %s", age_s, lock)
    lock.unlink(missing_ok=True)
    return True


def supported_isas() -> list[str]:
    """The kernel builds this CPU runs, best first. Checked before compiling: `-march=native`
    cannot compile a build the CPU lacks, and trying would cost every engine start a minute of
    failing g++. torch's AVX2 capability includes FMA."""
    isas = []
    if torch.cpu._is_avx512_supported() and torch.cpu._is_avx512_bf16_supported():
        isas.append("avx512_bf16")
    if torch.cpu._is_avx2_supported():
        isas.append("avx2")
    return isas


def best_isa() -> str | None:
    isas = supported_isas()
    return isas[0] if isas else None


def _source_digest() -> str:
    """Names the build after its sources and header: torch rebuilds on a source change only."""
    digest = hashlib.sha256()
    for path in sorted(CSRC.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def _smoke_test(module: ModuleType) -> None:
    """Run one tiny GEMM so a CPU without AVX512-BF16 fails here, not mid-request."""
    weight = torch.ones(GROUP_ROWS, 32, dtype=torch.bfloat16)
    out = module.linear(
        torch.ones(1, 32, dtype=torch.bfloat16),
        pack_weight(weight),
        64,
        Prologue.NONE,
        None,
        0.0,
        None,
    )
    if not torch.equal(out, torch.full((1, 64), 32.0, dtype=torch.bfloat16)):
        raise RuntimeError("kernel smoke test gave wrong results")


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] bf16 -> [ceil(N/64), ceil(K/2), 64, 2]: one group's K pairs are contiguous, so a decode
    step streams each weight once, 64 output rows at a time. Padding rows/columns are zero."""
    rows, cols = weight.shape
    padded_rows = -(-rows // GROUP_ROWS) * GROUP_ROWS
    padded = torch.zeros(padded_rows, cols + cols % 2, dtype=torch.bfloat16)
    padded[:rows, :cols] = weight
    groups = padded.view(padded_rows // GROUP_ROWS, GROUP_ROWS, -1, 2)
    return groups.permute(0, 2, 1, 3).contiguous()
