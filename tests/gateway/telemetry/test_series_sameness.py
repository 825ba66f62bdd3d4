"""The accumulated attempt metrics expose exactly what prometheus_client's own counters and
histograms exposed for the same attempts: names, help, types, label sets, values, buckets,
`_created` and exemplars, in the classic text and in OpenMetrics."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from adapters.types import Usage
from gateway.telemetry import AttemptMetrics, CallLabels, Metrics
from tests.gateway.telemetry.reference_metrics import ReferenceMetrics

# values on, just under and just over bucket bounds, zero, past the last bound, and NaN
_SECONDS = (0.0, 0.004, 0.005, 0.0051, 0.01, 0.02, 0.25, 1.0, 1.28, 2.5, 81.92, 120.0, 500.0)
_TOKENS = (0, 1, 3, 4, 5, 16, 1000, 4**13, 4**13 + 1)
_LABELS = (
    CallLabels("acme", "gpt-4o-mini", "openai-main", "openai"),
    CallLabels("acme", "claude-sonnet", "bedrock-us", "aws.bedrock"),
    CallLabels("globex", "gpt-4o-mini", "openai-main", "openai"),
    CallLabels("globex", "llama", "selfhost-a", "lantern"),
)


def _attempts(seed: int, n: int) -> Iterator[tuple[AttemptMetrics, float | None]]:
    rnd = random.Random(seed)
    for i in range(n):
        error = rnd.choice((None, None, None, "ProviderTimeout", "RateLimited"))
        status = "ok" if error is None else rnd.choice(("error", "client_disconnect"))
        usage = Usage(
            input_tokens=rnd.choice(_TOKENS),
            output_tokens=rnd.choice(_TOKENS),
            cache_read_tokens=rnd.choice(_TOKENS),
            cache_write_tokens=rnd.choice((0, 0, 7)),
        )
        cost = rnd.choice((0.0, 0.1, 0.0003, 1e-9, 2.5))
        ttft = rnd.choice((None, *_SECONDS))
        trace_id = rnd.choice((None, f"{i:032x}"))
        attempt = AttemptMetrics(
            rnd.choice(_LABELS), status, usage, cost, rnd.choice(_SECONDS), ttft, error, trace_id
        )
        yield attempt, rnd.choice((None, None, *_SECONDS))


def _exposition(
    metrics: Metrics | ReferenceMetrics, attempts: list[tuple[AttemptMetrics, float | None]]
) -> tuple[bytes, bytes]:
    for attempt, queued_s in attempts:
        metrics.record_attempt(attempt)
        if queued_s is not None:
            metrics.observe_queue(attempt.labels.model, queued_s)
    return generate_latest(metrics.registry), generate_openmetrics(metrics.registry)


def _ticking() -> Callable[[], float]:
    """A wall clock that moves a millisecond a reading: `_created` and exemplar times differ by
    label set and observation, and match only when both paths read it in the same order."""
    now = [1_700_000_000.0]

    def tick() -> float:
        now[0] += 0.001
        return now[0]

    return tick


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exposition_matches_prometheus_client(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = list(_attempts(seed, 400))
    monkeypatch.setattr(time, "time", _ticking())
    expected = _exposition(ReferenceMetrics(), attempts)
    monkeypatch.setattr(time, "time", _ticking())
    got = _exposition(Metrics(), attempts)
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert b'# {trace_id="' in got[1]  # the exemplars are there to compare


def test_nan_and_no_attempts_match(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = _LABELS[0]
    nan = AttemptMetrics(labels, "ok", Usage(), 0.0, float("nan"), float("nan"), None, "ab" * 16)
    for attempts in ([], [(nan, float("nan"))]):
        monkeypatch.setattr(time, "time", _ticking())
        expected = _exposition(ReferenceMetrics(), attempts)
        monkeypatch.setattr(time, "time", _ticking())
        assert _exposition(Metrics(), attempts) == expected


def test_negative_count_is_refused_as_before() -> None:
    labels = _LABELS[0]
    bad = AttemptMetrics(labels, "ok", Usage(input_tokens=1), -0.5, 0.1, None, None)
    with pytest.raises(ValueError, match="non-negative"):
        Metrics().record_attempt(bad)
    with pytest.raises(ValueError, match="non-negative"):
        ReferenceMetrics().record_attempt(bad)
