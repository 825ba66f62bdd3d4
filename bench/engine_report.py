"""Results of bench/engine.py and their Markdown (docs/bench/engine.md): tables, ratios, targets.

Pure formatting of measured numbers; text after the notes marker in an existing file is kept.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.engine_bandwidth import PairedRoofline, paired_lines
from bench.engine_http import Batch

NOTES_MARKER = "<!-- notes: hand-written below this line, kept when the bench rewrites the file -->"


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...] = (1, 4, 16)
    prompt_tokens: int = 500
    output_tokens: int = 128
    prefix_tokens: int = 1500
    suffix_tokens: int = 100
    ttft_repeats: int = 3
    paired_windows: int = 5  # Lantern's batch-1 decode windows between bandwidth probes


@dataclass
class SystemResult:
    name: str
    precision: str
    weight_bytes: int
    batches: dict[int, Batch] = field(default_factory=dict)
    ttft_cold_s: list[float] = field(default_factory=list)
    ttft_cached_s: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    load_avg: tuple[float, float] = (0.0, 0.0)  # 1-min load average before, after
    error: str = ""
    paired: PairedRoofline | None = None  # batch-1 decode between bandwidth probes (Lantern)

    @property
    def decode_b1_tok_s(self) -> float:
        one = self.batches.get(1)
        return one.completions[0].decode_tok_s if one else 0.0

    def bandwidth_util(self, bandwidth: float) -> float:
        return self.weight_bytes * self.decode_b1_tok_s / bandwidth

    def ttft_speedup(self) -> float:
        if not self.ttft_cold_s or not self.ttft_cached_s:
            return 0.0
        return statistics.median(self.ttft_cold_s) / statistics.median(self.ttft_cached_s)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f}" if values else "–"


def throughput_table(results: list[SystemResult], plan: Plan) -> list[str]:
    head = "| system | " + " | ".join(f"{c} conc.: total / output tok/s" for c in plan.levels)
    rows = [head + " |", "|---" * (len(plan.levels) + 1) + "|"]
    for r in results:
        cells = []
        for c in plan.levels:
            b = r.batches.get(c)
            cells.append(
                f"{b.total_tok_s:.1f} / {b.output_tok_s:.1f} ({b.wall_s:.1f} s)" if b else "–"
            )
        rows.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return rows


def latency_table(results: list[SystemResult], plan: Plan, bandwidth: float) -> list[str]:
    rows = [
        "| system | precision | TTFT cold ms | TTFT cached ms (cached tok) | cold/cached |"
        " batch-1 decode tok/s | weights MB/token | bandwidth util. | roofline tok/s |"
        " CPU cores used |",
        "|---" * 10 + "|",
    ]
    for r in results:
        roof = bandwidth / r.weight_bytes
        cores = r.cpu_s / r.wall_s if r.wall_s else 0.0
        rows.append(
            f"| {r.name} | {r.precision} | {_ms(r.ttft_cold_s)} | {_ms(r.ttft_cached_s)}"
            f" ({r.cached_tokens}) | {r.ttft_speedup():.1f}× | {r.decode_b1_tok_s:.1f} |"
            f" {r.weight_bytes / 1e6:.0f} | {r.bandwidth_util(bandwidth):.2f} | {roof:.0f} |"
            f" {cores:.2f} |"
        )
    return rows


def _total(r: SystemResult, level: int) -> float:
    b = r.batches.get(level)
    return b.total_tok_s if b else 0.0


def target_lines(results: list[SystemResult], plan: Plan, bandwidth: float) -> list[str]:
    by_name = {r.name: r for r in results}
    ours = by_name.get("lantern")
    if ours is None:
        return ["- Lantern's engine was not measured in this run."]
    top = max(plan.levels)
    lines = []
    for peer, goal in (("hf-transformers", 5.0), ("llama-server", 2.0)):
        other = by_name.get(peer)
        if other and _total(other, top):
            ratio = _total(ours, top) / _total(other, top)
            verdict = "met" if ratio >= goal else "NOT met"
            lines.append(
                f"- total tok/s at {top} concurrent, Lantern / {peer}: {ratio:.2f}×"
                f" (target ≥ {goal:g}×: {verdict})"
            )
    util = ours.bandwidth_util(bandwidth)
    lines.append(
        f"- Lantern batch-1 decode bandwidth utilisation against the best before/after reading:"
        f" {util:.2f} (target ≥ 0.6: {'met' if util >= 0.6 else 'NOT met'})"
    )
    if ours.paired and ours.paired.decode_tok_s:
        paired = statistics.median(ours.paired.ratios("sum"))
        safe = ours.paired.conservative_ratio("sum")
        lines.append(
            f"- Lantern batch-1 decode against the bandwidth measured between its decode windows"
            f" (torch.sum probe): median per-pair {paired:.2f}"
            f" (target ≥ 0.6: {'met' if paired >= 0.6 else 'NOT met'}); against the best single"
            f" reading {safe:.2f} ({'met' if safe >= 0.6 else 'NOT met'})"
        )
    speedup = ours.ttft_speedup()
    lines.append(
        f"- Lantern TTFT cold / with {plan.prefix_tokens}-token prefix cached: {speedup:.1f}×"
        f" (target ≥ 5×: {'met' if speedup >= 5 else 'NOT met'})"
    )
    return lines


def render(
    results: list[SystemResult],
    plan: Plan,
    bandwidth: float,
    conditions: list[str],
    notes: str,
) -> str:
    top = max(plan.levels)
    lines = [
        "# Engine benchmark: HF transformers vs llama-server vs Lantern's engine",
        "",
        "Written by `bench/engine.py` (issue 3); all systems measured side by side in one run,",
        "one after the other (never two at once), on the same model and prompts.",
        "",
        "## Conditions",
        "",
        *[f"- {c}" for c in conditions],
        "",
        "## Method",
        "",
        f"- Throughput: N ∈ {list(plan.levels)} requests sent at once, each a distinct synthetic"
        f" prompt of exactly {plan.prompt_tokens} tokens (model tokenizer) and {plan.output_tokens}"
        " output tokens forced (greedy; `ignore_eos` on the servers, `min_new_tokens` in HF).",
        "  Total tok/s = (prompt + output tokens of all N) / wall time from first send to last"
        " token; HF runs the N prompts as one static `generate` batch.",
        f"- TTFT cold: median of {plan.ttft_repeats} fresh prompts of"
        f" {plan.prefix_tokens + plan.suffix_tokens} tokens, 1 output token. TTFT cached: one"
        f" shared {plan.prefix_tokens}-token prefix served once, then median of"
        f" {plan.ttft_repeats} requests prefix + a fresh {plan.suffix_tokens}-token suffix"
        " (HF: a deep copy of the prefix's `past_key_values`, copy included in the time).",
        "- Batch-1 decode tok/s: (output tokens − 1) / (last − first token time) of the"
        " 1-concurrent request. Bandwidth utilisation = weight bytes read per decode step at the"
        " system's precision × decode tok/s ÷ measured read bandwidth; roofline tok/s ="
        " bandwidth ÷ weight bytes.",
        "- CPU cores used = CPU seconds of the serving process ÷ its wall time under test: below"
        " the core count means the system did not get (or could not use) the whole machine.",
        "",
        "## Results",
        "",
        f"Measured read bandwidth: **{bandwidth / 1e9:.1f} GB/s**.",
        "",
        *throughput_table(results, plan),
        "",
        *latency_table(results, plan, bandwidth),
        "",
        f"### Targets (issue 3, at {top} concurrent)",
        "",
        *target_lines(results, plan, bandwidth),
    ]
    for r in results:
        if r.paired and r.paired.decode_tok_s:
            lines += [
                "",
                f"### {r.name}: batch-1 decode between bandwidth probes",
                "",
                f"{len(r.paired.decode_tok_s)} decode windows of one {plan.prompt_tokens}-token"
                " prompt each, with a probe window (≈ 0.5 s of each probe) before the first and"
                " after each; a pair's ratio = weight bytes × decode tok/s ÷ the mean of the"
                " probe medians either side.",
                "",
                *paired_lines(r.paired),
            ]
    errors = [f"- {r.name}: {r.error}" for r in results if r.error]
    if errors:
        lines += ["", "### Failures in this run", "", *errors]
    return "\n".join(lines) + "\n\n" + NOTES_MARKER + "\n" + notes.lstrip("\n")


def kept_notes(existing: str) -> str:
    _, marker, notes = existing.partition(NOTES_MARKER)
    return notes if marker else ""
