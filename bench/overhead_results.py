"""The benchmark's figures: one target's calls in one slice of the run (`Visit`), its slices at
one rate pooled (`Result`), and the markdown tables `bench.gateway_overhead` prints."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass
class Visit:
    """One target's calls at one rate in one slice of the run: what `Result` pools."""

    latencies_ms: list[float]  # of the calls that succeeded, from their due time
    ttfbs_ms: list[float]
    sent: int
    cpu_ns: float  # the target's process tree during the slice (nan for direct)


def pooled_result(mode: str, target: str, rate: float, visits: list[Visit]) -> Result:
    """One target's slices at one rate as one result: latencies pooled, CPU summed, per call."""
    lat = sorted(x for v in visits for x in v.latencies_ms)
    ttfb = sorted(x for v in visits for x in v.ttfbs_ms)
    sent = sum(v.sent for v in visits)
    return Result(
        mode,
        target,
        rate,
        sent,
        sent - len(lat),
        _pct(lat, 0.5),
        _pct(lat, 0.99),
        _pct(ttfb, 0.5),
        sum(v.cpu_ns for v in visits) / 1e6 / max(1, sent),
    )


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


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
