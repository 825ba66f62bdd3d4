"""What one call costs once the CPU's caches have gone cold, simulated, so a loaded machine gives
the figures an idle one does (wall-clock CPU per call at 25 calls/s moves 0.4 ms run to run on
these hosts). The same build's figures still move ~5 % between runs: the ledger's writer thread
and the pollers run at times of their own, and the simulation counts every thread.

    .venv/bin/python -m bench.cold_cost [--calls 40] [--stream] [--previous REF] [--top 15]

At 25 calls/s the loop idles ~40 ms between calls and a call pays for every cache line it
touches: the bytecode, constants and globals of each function it runs, the memos and tables it
reads. Here N calls of bench/gateway_overhead.py's agent body go through the real app in
process (bench/gateway_inproc.py's canned upstream), each after 24 MB were copied (every
simulated cache level evicted), under valgrind's cachegrind (I1 and D1 32 KB, LL 8 MB); the
same process with no calls is subtracted and the difference divided by N. Reported per call:
instructions, and last-level misses on instruction fetches and data reads (each a trip to
memory, ~80-100 ns). `memcpy` is left out of the figures: the eviction is one.

`--previous REF` measures REF's build the same way beside this one (its worktree, this virtual
environment, its own bench/gateway_inproc.py). Needs valgrind (the system package); ~3 minutes
per build, the runs two at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

# Run as a script in another build's tree too (`--child`): only the standard library here;
# the bench and gateway modules are imported where they are used.

CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"]
EVICT_BYTES = 24 << 20
COPY = "memcpy"  # the eviction's symbol (__memcpy_avx_unaligned_erms and kin)
ZERO = [0] * 9


@dataclass(frozen=True, slots=True)
class ColdCall:
    """One call's simulated cold cost, memcpy left out."""

    instructions: float
    ll_instruction_misses: float
    ll_data_read_misses: float
    by_function: dict[str, tuple[float, float]]  # "file:function" -> (LL data reads, LL fetches)


def child(calls: int, stream: bool) -> None:
    """Runs in the measured build's tree (its modules first on sys.path): `calls` cold calls."""
    sys.path.insert(0, os.getcwd())
    import orjson
    import uvloop

    from bench.gateway_inproc import CannedUpstream, call_once
    from bench.gateway_overhead import agent_body, write_lantern_config
    from gateway.app import create_app
    from gateway.settings import load_settings

    evict_from = bytearray(EVICT_BYTES)

    async def run() -> None:
        with tempfile.TemporaryDirectory() as d:
            cfg = write_lantern_config(Path(d), "http://127.0.0.1:9/v1")
            app = create_app(load_settings(cfg))
            parts = app.state.components
            for route in parts.models.routes():
                for candidate in route.candidates:
                    candidate.backend._upstream = CannedUpstream()
            await parts.start()
            try:
                bodies = [orjson.dumps(agent_body(stream, i)) for i in range(calls + 10)]
                for i in range(10):  # warm: memos filled, code specialised
                    await call_once(app, bodies[calls + i])
                await asyncio.sleep(0.1)
                for i in range(calls):
                    evicted = bytes(evict_from)  # every simulated cache level now cold
                    await call_once(app, bodies[i])
                    del evicted
                    await asyncio.sleep(0.002)  # the after-reply batch runs
            finally:
                await parts.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())


def _cachegrind(tree: Path, calls: int, stream: bool, out: Path) -> subprocess.Popen[bytes]:
    from bench._procs import PY

    argv = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=yes",
        *CACHES,
        f"--cachegrind-out-file={out}",
        PY,
        str(Path(__file__).resolve()),
        "--child",
        str(calls),
        *(["--stream"] if stream else []),
    ]
    log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(argv, cwd=tree, stdout=log, stderr=subprocess.STDOUT)


def _events(path: Path) -> dict[str, list[int]]:
    """cachegrind's counts per "file:function": Ir, I1mr, ILmr, Dr, D1mr, DLmr, Dw, D1mw, DLmw."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0] * 9)
    where = function = ""
    for line in path.read_text().splitlines():
        if line.startswith("fl="):
            where = line[3:].rsplit("/", 1)[-1]
        elif line.startswith("fn="):
            function = line[3:]
        elif line[:1].isdigit():
            counts = totals[f"{where}:{function}"]
            for i, value in enumerate(line.split()[1:]):
                counts[i] += int(value)
    return totals


def cold_call(with_calls: Path, without: Path, calls: int) -> ColdCall:
    after, before = _events(with_calls), _events(without)
    diff = {
        name: [a - b for a, b in zip(after.get(name, ZERO), before.get(name, ZERO), strict=True)]
        for name in set(after) | set(before)
        if COPY not in name
    }

    def total(i: int) -> float:
        return sum(counts[i] for counts in diff.values()) / calls

    by_function = {name: (c[5] / calls, c[2] / calls) for name, c in diff.items()}
    return ColdCall(total(0), total(2), total(5), by_function)


def measure(trees: dict[str, Path], calls: int, stream: bool, work: Path) -> dict[str, ColdCall]:
    """Each build with `calls` calls and with none; two valgrind runs at a time."""
    jobs = [(name, n) for name in trees for n in (calls, 0)]
    outs = {job: work / f"{job[0].replace('@', '-')}-{job[1]}.out" for job in jobs}
    for i in range(0, len(jobs), 2):
        running = [
            _cachegrind(trees[name], n, stream, outs[name, n]) for name, n in jobs[i : i + 2]
        ]
        for proc, (name, n) in zip(running, jobs[i : i + 2], strict=True):
            if proc.wait() != 0:
                tail = outs[name, n].with_suffix(".log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"cachegrind of {name} ({n} calls) failed:\n{tail}")
    return {name: cold_call(outs[name, calls], outs[name, 0], calls) for name in trees}


def report(results: dict[str, ColdCall], top: int) -> None:
    print("| build | instructions | LL misses, data reads | LL misses, instruction fetches |")
    print("| --- | --- | --- | --- |")
    for name, r in results.items():
        print(
            f"| {name} | {r.instructions:,.0f} | {r.ll_data_read_misses:,.0f} "
            f"| {r.ll_instruction_misses:,.0f} |"
        )
    names = list(results)
    first = results[names[0]].by_function
    other = results[names[1]].by_function if len(names) > 1 else {}
    rows = sorted(
        set(first) | set(other),
        key=lambda k: -abs(first.get(k, (0, 0))[0] - other.get(k, (0, 0))[0]),
    )
    print(f"\nLL data-read misses per call by function ({' / '.join(names)}):")
    for name in rows[:top]:
        figures = " / ".join(f"{results[n].by_function.get(name, (0, 0))[0]:,.0f}" for n in names)
        print(f"  {figures}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--previous", metavar="REF", help="also this commit's build, same way")
    ap.add_argument("--top", type=int, default=15, help="functions listed by their misses")
    ap.add_argument("--child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.stream)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.cold_cost needs valgrind (apt-get install valgrind)")
    from bench._procs import ROOT
    from bench.previous_build import previous_build

    with tempfile.TemporaryDirectory() as d, ExitStack() as builds:
        trees = {"this build": ROOT}
        if args.previous:
            trees[args.previous] = builds.enter_context(previous_build(args.previous, Path(d)))
        report(measure(trees, args.calls, args.stream, Path(d)), args.top)


if __name__ == "__main__":
    main()
