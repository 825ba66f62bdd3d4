"""Cost of the durable ledger spool: each usage row appended (one write(2)) before the reply, side
by side with the in-memory queue alone (what the recorder did before the spool), in one run.

    .venv/bin/python -m bench.ledger_spool [--rate 100] [--duration-s 5] [--rounds 2]

Calls are paced at `--rate` per second through the real `CallLedger` -> `UsageRecorder` (SQLite
ledger, writer thread, the gateway's linger), rounds alternating spool / no spool. Per call it
reports the time `record()` takes on the caller's thread (what the reply waits for) and the
process CPU (caller plus writer thread) divided by the calls.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from adapters.types import Usage
from gateway.ledger.call_ledger import CallLedger
from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.recorder import RecorderConfig, UsageRecorder
from gateway.ports import CallRecord
from gateway.wiring import LEDGER_LINGER_S


class MemoryOnlyRecorder(UsageRecorder):
    """The reference: rows queued in memory only (lost if the process dies before the writer
    inserts them)."""

    def record_line(self, line: bytes) -> None:
        with self._wakeup:
            self._counts["recorded"] += 1
            self._pending.append((None, line))
            if len(self._pending) == 1:
                self._wakeup.notify()


def cpu_s_now() -> float:
    """This process's CPU seconds, all threads (microsecond resolution)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def call_record(n: int) -> CallRecord:
    return CallRecord(
        request_id=f"{n:032x}",
        attempt=0,
        tenant="acme",
        key_id="k1",
        session_id=f"session-{n % 50}",
        model="claude-sonnet-4-5",
        backend="anthropic",
        replica=None,
        status="ok",
        error_kind=None,
        usage=Usage(1200, 300, 4000, 0),
        cost_usd=0.0123,
        uncached_cost_usd=0.0456,
        ttft_ms=312.5,
        latency_ms=1830.0,
        cache_diagnosis='{"verdict":"hit","blocks":12}',
    )


def run_round(directory: Path, spooled: bool, rate: float, duration_s: float) -> dict[str, float]:
    url = f"sqlite:///{directory}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    kind = UsageRecorder if spooled else MemoryOnlyRecorder
    recorder = kind(engine, RecorderConfig(spool_dir=directory / "spool", linger_s=LEDGER_LINGER_S))
    recorder.start()
    ledger = CallLedger(recorder, lambda: datetime.now(UTC))
    num_calls = int(rate * duration_s)
    on_path_us: list[float] = []
    cpu_before, started = cpu_s_now(), time.perf_counter()
    for n in range(num_calls):
        due = started + n / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        record = call_record(n)
        t0 = time.perf_counter_ns()
        ledger.record(record)
        on_path_us.append((time.perf_counter_ns() - t0) / 1000)
    time.sleep(2 * LEDGER_LINGER_S)  # the writer's last batch falls inside the measurement
    cpu_s = cpu_s_now() - cpu_before
    recorder.close()
    engine.dispose()
    on_path_us.sort()
    return {
        "on_path_p50_us": statistics.median(on_path_us),
        "on_path_p99_us": on_path_us[int(0.99 * (len(on_path_us) - 1))],
        "cpu_per_call_us": cpu_s / num_calls * 1e6,
        "written": float(recorder.stats().num_written),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="calls per second")
    parser.add_argument("--duration-s", type=float, default=5.0, help="per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each variant")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"spool": [], "memory_only": []}
    with tempfile.TemporaryDirectory(prefix="lantern-bench-ledger-") as tmp:
        for r in range(args.rounds):
            for name in ("memory_only", "spool"):
                directory = Path(tmp) / f"{name}-{r}"
                directory.mkdir()
                results[name].append(
                    run_round(directory, name == "spool", args.rate, args.duration_s)
                )
    summary = {
        name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for name, rounds in results.items()
    }
    summary["spool_minus_memory_only_us"] = {
        key: summary["spool"][key] - summary["memory_only"][key]
        for key in ("on_path_p50_us", "on_path_p99_us", "cpu_per_call_us")
    }
    print(json.dumps({"rate": args.rate, "duration_s": args.duration_s, **summary}, indent=2))


if __name__ == "__main__":
    main()
