"""Engine-reported load: Prometheus text from the bundled engine, vLLM and SGLang parsed to
exact values, scraped from a real local HTTP server (good, malformed, 500, timeout), and
folded into the fleet's replica state (bringing stale samples up to date, ageing out)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.fleet.engine_metrics import (
    EngineLoad,
    MetricsMalformed,
    MetricsUnavailable,
    metrics_url,
    parse_metrics,
)
from gateway.fleet.signals import Counts, HttpMetricsSource, LoadSignals
from tests.fakes.engine_metrics import Engines, bundled

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.9
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="8192",prefix_caching="True"} 1.0
vllm:prompt_tokens_total{model_name="m"} 1.2e+06
"""

SGLANG = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 3.0
sglang:num_queue_reqs{model_name="m"} 4.0
sglang:token_usage{model_name="m"} 0.28
sglang:max_total_num_tokens{model_name="m"} 161721.0
"""


def test_the_bundled_engines_own_metrics_parse_to_exact_values() -> None:
    load = parse_metrics(bundled(waiting=3, running=5, kv_usage=0.75, kv_blocks=160), 12.0)
    assert load == EngineLoad(12.0, waiting=3, running=5, kv_usage=0.75, kv_capacity_tokens=2560)
    older = parse_metrics(bundled(waiting=0, running=1, kv_usage=0.5), 1.0)  # no pool size
    assert older == EngineLoad(1.0, waiting=0, running=1, kv_usage=0.5, kv_capacity_tokens=None)


def test_vllm_counts_are_summed_usage_averaged_and_capacity_read_from_cache_config() -> None:
    load = parse_metrics(VLLM, 1.0)
    assert (load.waiting, load.running, load.kv_usage) == (3, 12, pytest.approx(0.7))
    assert load.kv_capacity_tokens == 8192 * 16


def test_vllm_v0_usage_name_and_sglang_names() -> None:
    v0 = parse_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n', 0.0)
    assert v0 == EngineLoad(0.0, kv_usage=0.25)
    assert parse_metrics(SGLANG, 2.0) == EngineLoad(2.0, 4, 3, 0.28, 161721)


def test_odd_lines_are_skipped_and_text_without_load_metrics_is_malformed() -> None:
    text = 'garbage line here\nvllm:num_requests_waiting{model_name="m"} NaN\n# x\n'
    with pytest.raises(MetricsMalformed):
        parse_metrics(text, 0.0)
    with pytest.raises(MetricsMalformed):
        parse_metrics("<html>not metrics</html>", 0.0)
    ok = parse_metrics(text + 'vllm:num_requests_waiting{a="x\\"y"} 2 1700000000\n', 0.0)
    assert ok.waiting == 2


def test_metrics_url_is_the_server_root() -> None:
    assert metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h/engine", "stats/prom") == "http://h/engine/stats/prom"


@pytest.fixture
def engines() -> Iterator[Engines]:
    e = Engines()
    yield e
    e.close()


def scrape(url: str, timeout_s: float = 2.0) -> EngineLoad:
    async def go() -> EngineLoad:
        source = HttpMetricsSource(lambda: 5.0, timeout_s=timeout_s)
        try:
            return await source.scrape(url)
        finally:
            await source.aclose()

    return asyncio.run(go())


def test_scrape_good_malformed_500_and_timeout(engines: Engines) -> None:
    engines.bodies.update(
        good=bundled(2, 4, 0.5), bad="hello\nworld\n", err=500, slow="stall", vllm=VLLM
    )
    assert scrape(f"{engines.url}/good/metrics") == EngineLoad(5.0, 2, 4, 0.5)
    assert scrape(f"{engines.url}/vllm/metrics").kv_capacity_tokens == 131072
    with pytest.raises(MetricsMalformed):
        scrape(f"{engines.url}/bad/metrics")
    with pytest.raises(MetricsUnavailable, match="HTTP 500"):
        scrape(f"{engines.url}/err/metrics")
    with pytest.raises(MetricsUnavailable, match="Timeout"):
        scrape(f"{engines.url}/slow/metrics", timeout_s=0.2)
    with pytest.raises(MetricsUnavailable):
        scrape("http://127.0.0.1:9/metrics")  # nothing listens on the discard port


# --- bringing a sample up to date -------------------------------------------------------------


def test_a_stale_sample_moves_with_our_own_traffic_and_ages_out() -> None:
    signals = LoadSignals(interval_s=1.0, max_age_s=5.0)
    load = EngineLoad(10.0, waiting=2, running=6, kv_usage=0.5)
    signals.observe("r", load, Counts(dispatched=100, completed=90, inflight_blocks=300))
    # since the sample: 3 more dispatched, 1 completed, 40 more blocks pinned by our calls
    view = signals.view("r", 11.5, Counts(103, 91, 340), capacity_blocks=1000)
    assert view is not None
    assert (view.queue_depth, view.kv_free_blocks, view.age_s) == (4, 460, 1.5)
    # an engine with nothing waiting stays at zero whatever we dispatched since
    signals.observe("q", EngineLoad(10.0, waiting=0, kv_usage=0.99), Counts(0, 0, 0))
    view = signals.view("q", 11.0, Counts(5, 0, 100), capacity_blocks=1000)
    assert view is not None and (view.queue_depth, view.kv_free_blocks) == (0, 0)
    assert signals.view("r", 15.01, Counts(103, 91, 340), 1000) is None  # too old: fall back
    assert signals.view("unknown", 11.0, Counts(), 1000) is None


def test_failures_back_off_and_a_success_resets() -> None:
    signals = LoadSignals(interval_s=1.0, max_age_s=5.0, max_backoff_s=5.0)
    assert signals.is_due("r", 0.0)
    assert signals.failed("r", 0.0) == 1
    assert not signals.is_due("r", 1.9) and signals.is_due("r", 2.0)
    assert signals.failed("r", 2.0) == 2  # next at 2 + 4
    assert signals.failed("r", 6.0) == 3  # next at 6 + min(8, 5)
    assert not signals.is_due("r", 10.9) and signals.is_due("r", 11.0)
    signals.observe("r", EngineLoad(11.0, waiting=0), Counts())
    assert not signals.is_due("r", 11.5) and signals.is_due("r", 12.0)
    assert signals.failed("r", 12.0) == 1
