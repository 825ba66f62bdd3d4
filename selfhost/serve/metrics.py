"""Prometheus text exposition of the engine's stats (no client library, no global registry)."""

from __future__ import annotations

from selfhost.engine.llm_engine import EngineStats

PREFIX = "selfhost"


def render_metrics(stats: EngineStats, model_name: str) -> str:
    label = f'{{model_name="{model_name}"}}'
    lines: list[str] = []
    for name, kind, doc, value in _rows(stats):
        lines += [
            f"# HELP {PREFIX}_{name} {doc}",
            f"# TYPE {PREFIX}_{name} {kind}",
            f"{PREFIX}_{name}{label} {float(value)}",
        ]
    return "\n".join(lines) + "\n"


def _rows(stats: EngineStats) -> list[tuple[str, str, str, float]]:
    return [
        (
            "kv_cache_usage_perc",
            "gauge",
            "Fraction of KV blocks held by live requests",
            stats.kv_usage,
        ),
        ("kv_cache_total_blocks", "gauge", "KV blocks in the pool", stats.num_kv_blocks),
        ("num_requests_running", "gauge", "Requests in the running batch", stats.num_running),
        ("num_requests_waiting", "gauge", "Requests waiting for admission", stats.num_waiting),
        (
            "prefix_cache_hit_rate",
            "gauge",
            "Cached prompt tokens / prompt tokens",
            stats.prefix_hit_rate,
        ),
        (
            "prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up",
            stats.prefix_query_tokens,
        ),
        (
            "prefix_cache_hits_total",
            "counter",
            "Prompt tokens served from cache",
            stats.prefix_hit_tokens,
        ),
        (
            "num_preemptions_total",
            "counter",
            "Requests preempted (recompute)",
            stats.num_preemptions,
        ),
        ("prompt_tokens_total", "counter", "Prompt tokens computed", stats.prompt_tokens_total),
        ("generation_tokens_total", "counter", "Tokens generated", stats.generation_tokens_total),
        ("tokens_per_second", "gauge", "Tokens computed per second, last 10 s", stats.tokens_per_s),
    ]
