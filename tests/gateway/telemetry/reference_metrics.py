"""The reference path of the attempt metrics: prometheus_client's own `Counter` and `Histogram`,
recorded through `labels()`, as `Metrics.record_attempt` and `GenAIMetrics.record` once did.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.telemetry import AttemptMetrics

_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_TOKEN_BUCKETS = tuple(4**i for i in range(14))
_DURATION_BUCKETS_S = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_BASE = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
TENANT_LABEL = "lantern_tenant"
CHAT, INPUT, OUTPUT = "chat", "input", "output"
TOKEN_USAGE = "gen_ai_client_token_usage"
OPERATION_DURATION = "gen_ai_client_operation_duration_seconds"
TIME_TO_FIRST_CHUNK = "gen_ai_client_operation_time_to_first_chunk_seconds"


class ReferenceMetrics:
    """The same families, registered in the same order as `Metrics` registers them."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["tenant", "model", "backend", "status"]
        self.requests = Counter("lantern_requests", "Calls by outcome", labels, registry=r)
        self.tokens = Counter(
            "lantern_tokens", "Tokens by kind", ["tenant", "model", "kind"], registry=r
        )
        self.cost = Counter("lantern_cost_usd", "Cost in USD", ["tenant", "model"], registry=r)
        self.errors = Counter("lantern_errors", "Errors by kind", ["kind"], registry=r)
        self.ttft = self._latency(
            "lantern_ttft_seconds", "Time to first token", ["model", "backend"]
        )
        self.latency = self._latency(
            "lantern_latency_seconds", "Whole-call latency", ["model", "backend"]
        )
        self.queue = self._latency(
            "lantern_queue_seconds",
            "Time a call waited in the gateway for a slot on its replica (calls that waited)",
            ["model"],
        )
        Gauge("lantern_inflight_requests", "Calls in flight", registry=r)
        Gauge("lantern_policy_errors", "Tenant policy files currently invalid", registry=r)
        self.gen_tokens = Histogram(
            TOKEN_USAGE,
            "Number of input and output tokens used",
            [*_BASE, "gen_ai_token_type", TENANT_LABEL],
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            OPERATION_DURATION,
            "GenAI operation duration",
            [*_BASE, "error_type", TENANT_LABEL],
            buckets=_DURATION_BUCKETS_S,
            registry=r,
        )
        self.first_chunk = Histogram(
            TIME_TO_FIRST_CHUNK,
            "Time to receive the first chunk of a streamed reply",
            [*_BASE, TENANT_LABEL],
            buckets=_DURATION_BUCKETS_S,
            registry=r,
        )

    def _latency(self, name: str, doc: str, labels: list[str]) -> Histogram:
        return Histogram(name, doc, labels, buckets=_LATENCY_BUCKETS_S, registry=self.registry)

    def record_attempt(self, a: AttemptMetrics) -> None:
        lb, usage = a.labels, a.usage
        self.requests.labels(lb.tenant, lb.model, lb.backend, a.status).inc()
        for kind, n in (
            ("input", usage.input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            if n:
                self.tokens.labels(lb.tenant, lb.model, kind).inc(n)
        if a.cost_usd:
            self.cost.labels(lb.tenant, lb.model).inc(a.cost_usd)
        self.latency.labels(lb.model, lb.backend).observe(a.latency_s)
        if a.ttft_s is not None:
            self.ttft.labels(lb.model, lb.backend).observe(a.ttft_s)
        if a.error_kind:
            self.errors.labels(a.error_kind).inc()
        self._record_genai(a)

    def _record_genai(self, a: AttemptMetrics) -> None:
        lb, usage = a.labels, a.usage
        base = (CHAT, lb.provider, lb.model)
        exemplar = {"trace_id": a.trace_id} if a.trace_id is not None else None
        if usage.prompt_tokens:
            self.gen_tokens.labels(*base, INPUT, lb.tenant).observe(usage.prompt_tokens, exemplar)
        if usage.output_tokens:
            self.gen_tokens.labels(*base, OUTPUT, lb.tenant).observe(usage.output_tokens, exemplar)
        error_type = a.error_kind or ""
        self.duration.labels(*base, error_type, lb.tenant).observe(a.latency_s, exemplar)
        if a.ttft_s is not None:
            self.first_chunk.labels(*base, lb.tenant).observe(a.ttft_s, exemplar)

    def observe_queue(self, model: str, waited_s: float) -> None:
        self.queue.labels(model).observe(waited_s)
