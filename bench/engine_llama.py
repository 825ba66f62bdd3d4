"""llama.cpp's `llama-server` for bench/engine.py: fetch the sdist that vendors its source, build the
server target with cmake, and the argv that runs it. Everything lands in git-ignored bench/_work/.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

WORK = Path(__file__).resolve().parent / "_work"
SDIST_GLOB = "llama_cpp_python-*.tar.gz"
CMAKE_FLAGS = (
    "-DLLAMA_BUILD_SERVER=ON",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_CURL=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
)


class LlamaBuildFailed(RuntimeError):
    """Downloading, unpacking or compiling llama-server failed (see the log named)."""


def source_dir(work: Path = WORK) -> Path | None:
    """The unpacked sdist holding vendor/llama.cpp, newest version first."""
    found = sorted(p for p in work.glob("llama_cpp_python-*") if (p / "vendor/llama.cpp").is_dir())
    return found[-1] if found else None


def server_binary(work: Path = WORK) -> Path | None:
    src = source_dir(work)
    binary = src / "build/bin/llama-server" if src else None
    return binary if binary and binary.exists() else None


def _run(argv: list[str], log: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise LlamaBuildFailed(f"{' '.join(argv[:4])} exited {done.returncode}; see {log}")


def build(work: Path = WORK, jobs: int = 2) -> Path:
    """Download (pip), unpack and compile llama-server unless it is already there; return its path.

    Takes tens of minutes on two cores; the log goes to bench/_work/build.log.
    """
    binary = server_binary(work)
    if binary:
        return binary
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    if not sorted(work.glob(SDIST_GLOB)):
        pip = [sys.executable, "-m", "pip", "download", "llama-cpp-python"]
        _run([*pip, "--no-deps", "--no-binary", ":all:", "-d", str(work)], log)
    if source_dir(work) is None:
        with tarfile.open(sorted(work.glob(SDIST_GLOB))[-1]) as archive:
            archive.extractall(work, filter="data")
    src = source_dir(work)
    if src is None:
        raise LlamaBuildFailed(f"no vendor/llama.cpp in the sdist under {work}")
    _run(
        ["cmake", "-B", str(src / "build"), "-S", str(src / "vendor/llama.cpp"), *CMAKE_FLAGS], log
    )
    _run(["cmake", "--build", str(src / "build"), "--target", "llama-server", f"-j{jobs}"], log)
    binary = server_binary(work)
    if binary is None:
        raise LlamaBuildFailed(f"build finished but no llama-server binary; see {log}")
    return binary


def server_argv(
    binary: Path, gguf: Path, port: int, threads: int, slots: int, ctx_per_slot: int
) -> list[str]:
    """llama-server with `slots` parallel slots, each with `ctx_per_slot` tokens of context."""
    return [
        str(binary),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        "-np",
        str(slots),
        "-c",
        str(slots * ctx_per_slot),
        "--no-webui",
        "--poll",  # 0: worker threads sleep instead of spinning (the machine's cores are shared)
        "0",
        *(["--no-repack"] if cpu_has_amx() else []),
    ]


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU reports AMX tiles. On such a host (a KVM Xeon, 2026-12-01) llama-server
    0.3.36 built with GGML_NATIVE puts the Q4_1 weights in its AMX buffer and the first matmul
    faults at `ldtilecfg` (ggml_backend_amx_mul_mat, SIGSEGV/SIGILL); `--no-repack` keeps the
    weights in plain CPU buffers, served by its AVX512 kernels."""
    try:
        flags = next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return "amx_tile" in flags.split()


def version(binary: Path) -> str:
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return next((line for line in lines if line.startswith("version")), "unknown")
