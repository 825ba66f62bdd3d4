"""The benchmark's figures: one target at one rate (`Result`), the median over rounds, and the
markdown tables `bench.gateway_overhead` prints."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median


@dataclass
class Result:
    mode: str  # "non-stream" or "stream"
    target: str
    rate: float
    sent: int
    errors: int
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float  # first response-body bytes (for streams: the first SSE chunk)
    cpu_ms_per_call: float  # the target's process tree, per call sent (nan for direct)

    @property
    def is_sustained(self) -> bool:
        return self.errors == 0 and self.p99_ms < 1000


def median_result(runs: list[Result]) -> Result:
    """One target's rounds at one rate: the median of each figure, the calls and errors summed."""
    first = runs[0]
    return Result(
        first.mode,
        first.target,
        first.rate,
        sum(r.sent for r in runs),
        sum(r.errors for r in runs),
        median(r.p50_ms for r in runs),
        median(r.p99_ms for r in runs),
        median(r.ttfb_p50_ms for r in runs),
        median(r.cpu_ms_per_call for r in runs),
    )


def report(results: list[Result]) -> None:
    """Markdown tables: per rate, each target with its latency added over direct, and CPU."""
    direct = {r.rate: r for r in results if r.target == "direct"}
    litellm = {r.rate: r for r in results if r.target == "litellm"}
    print(f"\n### {results[0].mode}\n")
    print("| target | rate/s | p50 ms | p99 ms | added p50 | added p99 | added TTFB p50 |", end="")
    print(" CPU ms/call | CPU vs LiteLLM | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        d, ll = direct.get(r.rate), litellm.get(r.rate)
        ratio = (
            f"{r.cpu_ms_per_call / ll.cpu_ms_per_call:.2f}" if ll and r.target != "direct" else ""
        )
        added = (
            (
                f"{r.p50_ms - d.p50_ms:+.1f}",
                f"{r.p99_ms - d.p99_ms:+.1f}",
                f"{r.ttfb_p50_ms - d.ttfb_p50_ms:+.1f}",
            )
            if d and r.target != "direct"
            else ("", "", "")
        )
        cpu = "" if r.target == "direct" else f"{r.cpu_ms_per_call:.2f}"
        print(
            f"| {r.target} | {r.rate:g} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {' | '.join(added)} | "
            f"{cpu} | {ratio} | {r.errors} |"
        )
    print()
    for name in dict.fromkeys(r.target for r in results):
        print(f"highest sustainable rate ({name}): {_sustained(results, name):g}/s")


def _sustained(results: list[Result], name: str) -> float:
    """The highest rate passed with every lower rate passed too (0 if the first failed)."""
    best = 0.0
    for r in sorted((r for r in results if r.target == name), key=lambda r: r.rate):
        if not r.is_sustained:
            break
        best = r.rate
    return best
