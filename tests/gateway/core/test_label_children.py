"""`LabelChildren`: memoised `labels()` children give the same series as `labels()` itself."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.telemetry import LabelChildren


def test_children_are_the_labelled_series_and_are_reused() -> None:
    registry = CollectorRegistry()
    calls = Counter("calls", "c", ["tenant", "reason"], registry=registry)
    spend = Gauge("spend", "s", ["tenant"], registry=registry)
    child = LabelChildren()
    assert child(calls, "a", "kept") is child(calls, "a", "kept")
    assert child(calls, "a", "kept") is calls.labels("a", "kept")  # prometheus' own child
    child(calls, "a", "kept").inc()
    child(calls, "b", "kept").inc(2)
    child(spend, "a").set(1.5)  # same label values, another metric: another child
    assert registry.get_sample_value("calls_total", {"tenant": "a", "reason": "kept"}) == 1
    assert registry.get_sample_value("calls_total", {"tenant": "b", "reason": "kept"}) == 2
    assert registry.get_sample_value("spend", {"tenant": "a"}) == 1.5
