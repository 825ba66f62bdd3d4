"""The request path's work, counted, and its committed budget (bench/request_budget.json).

    .venv/bin/python -m bench.request_budget             # measure and check (make check)
    .venv/bin/python -m bench.request_budget --update    # re-measure and write the budget
    .venv/bin/python -m bench.request_budget --profile 30 [--json FILE]   # per function

One non-streamed and one streamed agent call (bench/gateway_overhead.py's 22.6 KB body) through
the real app in process (front door, pipeline, ledger spool, metrics, after-reply bookkeeping),
its upstream a wire-level fake in another process (bench/canned_upstream.py). Counted after 10
warm-up calls of each kind, so one-time work is left out: Python function calls and C calls on
the loop's thread (`sys.setprofile`), the distinct Python functions they ran and those
functions' bytecode (the code a call touches: what it costs after an idle gap, when the CPU's
caches have gone cold), and in other calls of the same kind the peak of what the call
allocated (`tracemalloc`). Time is pinned (the gateway's clock moves 40 ms between calls,
not during one), as are randomness and the hash seed: the same build counts the same calls on a
loaded machine as on an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import random
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import orjson
import uvloop

from bench._procs import PY, free_port, start, stop
from bench.gateway_overhead import KEY, agent_body, write_lantern_config
from gateway.app import create_app
from gateway.http.sse_reply import DISCONNECT_HOOK, DisconnectHook
from gateway.settings import load_settings
from gateway.wiring import build_components, ledger

BUDGET = Path(__file__).with_name("request_budget.json")
NUM_WARMUP = 10
REPEATS = 3  # calls of each kind counted; the least is kept
KINDS = ("non_stream", "stream")
# What a figure may exceed its budget by. Calls repeat exactly run to run on one build (the
# least of 3 leaves out the pollers' timers); the peak moves ~1.5 % with what the call's memos
# already hold and what a timer allocates meanwhile, so it only catches a larger step (a copy
# of the body is +7 %). Distinct functions and their bytecode repeat exactly too; 1 % lets a
# function be split in two, not a module's worth of new code run on every call.
SLACK = {
    "num_calls": 0.002,
    "num_c_calls": 0.002,
    "num_functions": 0.01,
    "code_bytes": 0.01,
    "peak_bytes": 0.03,
}


@dataclass(frozen=True, slots=True)
class Work:
    """What one call did on the loop's thread."""

    num_calls: int  # Python function calls (and generator/coroutine resumptions)
    num_c_calls: int  # calls of C functions and methods from Python
    # The code a call touches. At 25 calls/s the loop idles 40 ms between calls and the CPU's
    # caches go cold: each distinct function's bytecode, constants and globals are read from
    # memory again. A build that makes fewer calls over more distinct code costs more there.
    num_functions: int  # distinct Python functions run (generated ones included)
    code_bytes: int  # their bytecode, `len(co_code)` summed
    peak_bytes: int  # the high-water mark of what the call had allocated (tracemalloc)


class CallClock:
    """The monotonic clock the gateway is built with: it stands still during a call and moves
    40 ms between calls (25 calls/s), whatever other tasks read it and whenever."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Gateway:
    """The real app over the canned upstream, driven in process, one call at a time."""

    def __init__(self, app: Any, clock: CallClock) -> None:
        self.app = app
        self.clock = clock
        self.parts = app.state.components
        self.num_bodies = 0

    def body(self, stream: bool) -> bytes:
        self.num_bodies += 1  # each call a new agent turn, as a session sends them
        return orjson.dumps(agent_body(stream, self.num_bodies))

    async def call(self, body: bytes) -> None:
        """One POST; returns after the reply's last byte and the after-reply bookkeeping."""
        self.clock.now += 0.040
        sent: list[dict[str, Any]] = []
        done = asyncio.Event()
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(_scope(body), receive, send)
        done.set()
        for _ in range(3):  # the after-reply batch and the watcher's exit run on these turns
            await asyncio.sleep(0)
        if sent[0]["status"] != 200:
            raise RuntimeError(f"status {sent[0]['status']}: {sent[1:]}")


def _scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
        "state": {},
        # what `lantern serve`'s connection gives a request (gateway/http/server.py)
        "extensions": {DISCONNECT_HOOK: {"connection": DisconnectHook()}},
    }


@asynccontextmanager
async def gateway() -> Any:
    """A started gateway (pinned clock, seeded randomness) in front of the canned upstream."""
    random.seed(0)
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        argv = [PY, "-m", "bench.canned_upstream", "--port", str(port)]
        upstream = start(argv, f"http://127.0.0.1:{port}/", log=Path(d) / "upstream.log")
        try:
            settings = load_settings(write_lantern_config(Path(d), f"http://127.0.0.1:{port}/v1"))
            clock = CallClock()
            with _ledger_linger(0.01):  # `_idle` waits for the writer: not a second each time
                app = create_app(settings, build_components(settings, clock=clock))
            await app.state.components.start()
            try:
                gw = Gateway(app, clock)
                for stream in (False, True) * NUM_WARMUP:
                    await gw.call(gw.body(stream))
                yield gw
            finally:
                await app.state.components.stop()
        finally:
            stop(upstream)


@contextmanager
def _ledger_linger(seconds: float) -> Iterator[None]:
    """Components built meanwhile get a ledger writer that lingers `seconds` for a batch to fill
    (the call's path is the same whatever the linger: it only queues the row's line)."""
    default = ledger.LEDGER_LINGER_S
    ledger.LEDGER_LINGER_S = seconds
    try:
        yield
    finally:
        ledger.LEDGER_LINGER_S = default


async def _idle(gw: Gateway, timeout_s: float = 10.0) -> None:
    """Until the ledger's writer thread has taken every row (whether a call's row wakes it, a
    `notify`, depends on it), the garbage collected, and every timer due by then has run (those
    that fell due during the collection would otherwise run inside the counted call)."""
    registry = gw.parts.metrics.registry
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while registry.get_sample_value("lantern_ledger_rows_pending") and loop.time() < deadline:
        await asyncio.sleep(0.05)
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)


@contextmanager
def _quiet() -> Iterator[None]:
    """No collection and no thread switch mid-call: both would land at timing-dependent points."""
    gc.disable()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        gc.enable()


async def count_calls(
    gw: Gateway, stream: bool, per_function: dict[str, int] | None = None
) -> Work:
    """Python calls, C calls and the distinct functions of one call (no `peak_bytes`: traced
    apart, `count_peak_bytes`); `per_function` gets the calls by function."""
    codes: dict[CodeType, int] = {}
    c_funcs: dict[str, int] = {}

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            codes[frame.f_code] = codes.get(frame.f_code, 0) + 1
        elif event == "c_call":
            name = f"{getattr(arg, '__module__', None) or ''}.{arg.__qualname__}"
            c_funcs[name] = c_funcs.get(name, 0) + 1

    body = gw.body(stream)
    await _idle(gw)
    with _quiet():
        sys.setprofile(hook)
        try:
            await gw.call(body)
        finally:
            sys.setprofile(None)
    if per_function is not None:
        for code, n in codes.items():
            where = f"{_short(code.co_filename)}:{code.co_firstlineno}({code.co_qualname})"
            per_function[where] = per_function.get(where, 0) + n
        for name, n in c_funcs.items():
            per_function[f"<C> {name}"] = per_function.get(f"<C> {name}", 0) + n
    code_bytes = sum(len(code.co_code) for code in codes)
    return Work(sum(codes.values()), sum(c_funcs.values()), len(codes), code_bytes, peak_bytes=0)


def _short(filename: str) -> str:
    for marker in ("/site-packages/", "/lib/python3."):
        if marker in filename:
            return filename.split(marker, 1)[1]
    root = str(Path(__file__).resolve().parent.parent) + "/"
    return filename.removeprefix(root)


async def count_peak_bytes(gw: Gateway, stream: bool) -> int:
    """The most that one call had allocated at any moment (not what it still holds at its end:
    that depends on what its memos held before, ±30 % call to call)."""
    body = gw.body(stream)
    await _idle(gw)
    with _quiet():
        tracemalloc.start(1)
        try:
            await gw.call(body)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return peak


async def measure_in(
    gw: Gateway, per_function: dict[str, dict[str, int]] | None = None
) -> dict[str, Work]:
    """Each kind of call counted `REPEATS` times, then as often with allocations traced; the
    least of each figure: a timer of another task (a poll every second) that fires during a
    call only ever adds to it."""
    work: dict[str, Work] = {}
    for kind in KINDS:
        stream = kind == "stream"
        counted = []
        for _ in range(REPEATS):
            funcs: dict[str, int] = {}
            counted.append((await count_calls(gw, stream, funcs), funcs))
        least, funcs = min(counted, key=lambda c: c[0].num_calls)
        if per_function is not None:
            per_function[kind] = funcs
        peak = min([await count_peak_bytes(gw, stream) for _ in range(REPEATS)])
        work[kind] = replace(least, peak_bytes=peak)
    return work


async def measure(
    setup: Callable[[Gateway], None] | None = None,
    per_function: dict[str, dict[str, int]] | None = None,
) -> dict[str, Work]:
    """The work of each kind of call on a fresh gateway; `setup` may change it first (tests)."""
    async with gateway() as gw:
        if setup is not None:
            setup(gw)
        return await measure_in(gw, per_function)


def run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def over_budget(work: dict[str, Work], budget: dict[str, Any]) -> list[str]:
    """Each figure above its budget by more than the slack, said in one line."""
    problems = []
    for kind in KINDS:
        allowed = budget[kind]
        for name, value in asdict(work[kind]).items():
            limit = allowed[name] * (1 + SLACK[name])
            if value > limit:
                problems.append(
                    f"{kind}.{name}: {value:,} against a budget of {allowed[name]:,} "
                    f"(+{value / allowed[name] - 1:.1%})"
                )
    return problems


def load_budget(path: Path = BUDGET) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


ABOUT = (
    "The work of one non-streamed and one streamed agent call through the real gateway "
    "(bench/request_budget.py), checked by `make check`: Python calls and C calls may exceed "
    "these by 0.2 %, the distinct functions run and their bytecode by 1 %, the allocations' "
    "peak by 3 %. A change that adds work to every call raises them in the same commit: "
    "`python -m bench.request_budget --update`, and the commit "
    "body says what each call now does and why it must. Counts follow the Python version and "
    "the dependencies' code: after an upgrade, re-measure in a commit of its own."
)


def write_budget(work: dict[str, Work], path: Path = BUDGET) -> None:
    data: dict[str, Any] = {"about": ABOUT, "python": python_version()}
    data.update({kind: asdict(work[kind]) for kind in KINDS})
    path.write_text(json.dumps(data, indent=2) + "\n")


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:2]))


def _pinned_hash_seed(argv: list[str]) -> None:
    """Set and dict iteration orders follow the hash seed, and with them some counts."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execve(PY, [PY, "-m", "bench.request_budget", *argv], env)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--update", action="store_true", help="write the measured work as budget")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="the N most called")
    ap.add_argument("--json", type=Path, help="write the per-function counts here")
    args = ap.parse_args(argv)
    _pinned_hash_seed(argv)
    logging.basicConfig(level=logging.ERROR)  # the pollers' notes about the fake upstream
    per_function: dict[str, dict[str, int]] = {}
    work: dict[str, Work] = run(measure(per_function=per_function))
    for kind in KINDS:
        print(f"{kind}: {asdict(work[kind])}")
        top = sorted(per_function[kind].items(), key=lambda kv: -kv[1])[: args.profile]
        for where, n in top:
            print(f"  {n:6d}  {where}")
    if args.json:
        args.json.write_text(json.dumps(per_function, indent=1, sort_keys=True))
    if args.update:
        write_budget(work)
        print(f"wrote {BUDGET.name}: commit it with the reason for the change in the body")
        return 0
    budget = load_budget()
    if budget.get("python") != python_version():
        print(f"note: the budget was measured on Python {budget.get('python')}")
    problems = over_budget(work, budget)
    for line in problems:
        print(f"over budget: {line}")
    if problems:
        print("the request path does more work than bench/request_budget.json allows: win it")
        print("back, or raise the budget in the same commit (python -m bench.request_budget")
        print("--update) and say in the commit body what the call now does and why")
        return 1
    print("within bench/request_budget.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
