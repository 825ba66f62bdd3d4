"""An attempt's metrics land in exactly the series a scrape reads back."""

from __future__ import annotations

from dataclasses import asdict

from adapters.types import Usage
from cachekeys.diagnosis import CacheDiagnosis, Reason
from gateway.telemetry import AttemptMetrics, CallLabels, Metrics


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_record_attempt_counts_every_series_exactly() -> None:
    metrics = Metrics()
    labels = CallLabels("acme", "gpt-4o-mini", "fake", "openai")
    usage = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=900)
    for _ in range(3):
        metrics.record_attempt(AttemptMetrics(labels, "ok", usage, 0.25, 0.004, 0.002, None))
    metrics.record_attempt(
        AttemptMetrics(labels, "error", Usage(), 0.0, 0.5, None, "ProviderTimeout")
    )
    metrics.requests.inc(("acme", "gpt-4o-mini", "fake", "ok"))  # the same series, directly
    tenant_model = {"tenant": "acme", "model": "gpt-4o-mini"}
    ok = {**tenant_model, "backend": "fake", "status": "ok"}
    assert _value(metrics, "lantern_requests_total", **ok) == 4.0
    assert _value(metrics, "lantern_requests_total", **{**ok, "status": "error"}) == 1.0
    assert _value(metrics, "lantern_tokens_total", **tenant_model, kind="input") == 300.0
    assert _value(metrics, "lantern_tokens_total", **tenant_model, kind="cache_read") == 2700.0
    assert _value(metrics, "lantern_tokens_total", **tenant_model, kind="cache_write") is None
    assert _value(metrics, "lantern_cost_usd_total", **tenant_model) == 0.75
    assert _value(metrics, "lantern_errors_total", kind="ProviderTimeout") == 1.0
    backend = {"model": "gpt-4o-mini", "backend": "fake"}
    assert _value(metrics, "lantern_latency_seconds_count", **backend) == 4.0
    assert _value(metrics, "lantern_ttft_seconds_count", **backend) == 3.0
    genai = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": "gpt-4o-mini",
        "lantern_tenant": "acme",
    }
    tokens = "gen_ai_client_token_usage_sum"
    assert _value(metrics, tokens, **genai, gen_ai_token_type="input") == 3000.0
    assert _value(metrics, tokens, **genai, gen_ai_token_type="output") == 21.0
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert _value(metrics, duration, **genai, error_type="") == 3.0
    assert _value(metrics, duration, **genai, error_type="ProviderTimeout") == 1.0
    first = "gen_ai_client_operation_time_to_first_chunk_seconds_count"
    assert _value(metrics, first, **genai) == 3.0


def test_diagnosis_dict_matches_its_fields() -> None:
    d = CacheDiagnosis(Reason.FIRST_CALL, False, 1200, 0, 0, "messages[3][0]", 1.5)
    assert d.as_dict() == {**asdict(d), "reason": "first_call"}
