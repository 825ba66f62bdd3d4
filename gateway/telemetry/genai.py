"""OpenTelemetry's GenAI client metrics as Prometheus histograms, named and labelled as OTel's
Prometheus exporter would name them (dots to underscores, unit `s` as `_seconds`, `{token}`
dropped), with a trace exemplar when the call was traced. Counts and times only, never text.
"""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_TOKEN_TYPE,
    GenAiOperationNameValues,
    GenAiTokenTypeValues,
)
from opentelemetry.semconv._incubating.metrics.gen_ai_metrics import (
    GEN_AI_CLIENT_OPERATION_DURATION,
    GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    GEN_AI_CLIENT_TOKEN_USAGE,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from prometheus_client import CollectorRegistry

from adapters.types import Usage
from gateway.telemetry.labels import CallLabels
from gateway.telemetry.series import HistogramSeries

CHAT = GenAiOperationNameValues.CHAT.value
EMBEDDINGS = GenAiOperationNameValues.EMBEDDINGS.value
INPUT = GenAiTokenTypeValues.INPUT.value
OUTPUT = GenAiTokenTypeValues.OUTPUT.value
TENANT_LABEL = "lantern_tenant"
# the conventions' advised bucket boundaries
_TOKEN_BUCKETS = tuple(4**i for i in range(14))  # 1 .. 67,108,864
_DURATION_BUCKETS_S = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip


def prometheus_name(otel_name: str, unit: str) -> str:
    """The name OTel's Prometheus exporter gives a metric: `.` → `_`, `s` → `_seconds`."""
    base = otel_name.replace(".", "_")
    return f"{base}_seconds" if unit == "s" else base


def label(attribute: str) -> str:
    return attribute.replace(".", "_")


TOKEN_USAGE = prometheus_name(GEN_AI_CLIENT_TOKEN_USAGE, "{token}")
OPERATION_DURATION = prometheus_name(GEN_AI_CLIENT_OPERATION_DURATION, "s")
TIME_TO_FIRST_CHUNK = prometheus_name(GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK, "s")
_BASE = [label(GEN_AI_OPERATION_NAME), label(GEN_AI_PROVIDER_NAME), label(GEN_AI_REQUEST_MODEL)]


class GenAIMetrics:
    """`gen_ai.client.token.usage`, `gen_ai.client.operation.duration` and
    `gen_ai.client.operation.time_to_first_chunk` of every call attempt, by tenant."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = HistogramSeries(
            TOKEN_USAGE,
            "Number of input and output tokens used",
            [*_BASE, label(GEN_AI_TOKEN_TYPE), TENANT_LABEL],
            _TOKEN_BUCKETS,
            registry,
        )
        self.duration = HistogramSeries(
            OPERATION_DURATION,
            "GenAI operation duration",
            [*_BASE, label(ERROR_TYPE), TENANT_LABEL],
            _DURATION_BUCKETS_S,
            registry,
        )
        self.first_chunk = HistogramSeries(
            TIME_TO_FIRST_CHUNK,
            "Time to receive the first chunk of a streamed reply",
            [*_BASE, TENANT_LABEL],
            _DURATION_BUCKETS_S,
            registry,
        )

    def record(
        self,
        labels: CallLabels,
        usage: Usage,
        duration_s: float,
        ttft_s: float | None,
        error_kind: str | None,
        trace_id: str | None,
        operation: str = CHAT,
    ) -> None:
        """One attempt of `operation` (`chat`, `embeddings`); its trace id, when traced, as the
        exemplar of each observation."""
        provider, model, tenant = labels.provider, labels.model, labels.tenant
        exemplar = {"trace_id": trace_id} if trace_id is not None else None
        if usage.prompt_tokens:
            self.tokens.observe(
                (operation, provider, model, INPUT, tenant), usage.prompt_tokens, exemplar
            )
        if usage.output_tokens:
            self.tokens.observe(
                (operation, provider, model, OUTPUT, tenant), usage.output_tokens, exemplar
            )
        self.duration.observe(
            (operation, provider, model, error_kind or "", tenant), duration_s, exemplar
        )
        if ttft_s is not None:
            self.first_chunk.observe((operation, provider, model, tenant), ttft_s, exemplar)
