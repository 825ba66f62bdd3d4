"""The metrics and spans of one embeddings call in OpenTelemetry's GenAI conventions
(`gen_ai.operation.name` = `embeddings`): the GenAI client metrics and Lantern's own, as a chat
attempt records them; while tracing, the gateway's server span (a child of the client's
`traceparent`) and the upstream call's client span, whose context goes upstream. A call refused
before its upstream call gets a server span saying why. Counts only, never the input's text.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga
from opentelemetry.util.types import AttributeValue

from adapters.types import JSON, Usage
from gateway.core.attempts import backend_provider
from gateway.ports import Candidate
from gateway.telemetry import (
    AttemptFacts,
    AttemptMetrics,
    CallFacts,
    CallLabels,
    CallTrace,
    ClientTrace,
    Ending,
    Telemetry,
)
from gateway.telemetry.genai import EMBEDDINGS

log = logging.getLogger("lantern.embeddings")
DOOR = "embeddings"


def dimension_count(body: Mapping[str, JSON]) -> int | None:
    """The length of the reply's first vector (floats, or base64 of float32s); None when the
    reply has none to read."""
    data = body.get("data")
    first = data[0] if isinstance(data, list) and data else None
    vector = first.get("embedding") if isinstance(first, dict) else None
    if isinstance(vector, list):
        return len(vector)
    if isinstance(vector, str):
        try:
            return len(base64.b64decode(vector, validate=True)) // 4
        except (binascii.Error, ValueError):
            return None
    return None


class EmbeddingTelemetry:
    """One embeddings call's telemetry: begun when the call's model is known, then told of its
    refusal, or of its upstream call's start and end."""

    def __init__(
        self,
        telemetry: Telemetry,
        tenant: str,
        model: str,
        request_id: str,
        session: str | None,
        client: ClientTrace | None,
        clock: Callable[[], float],
    ) -> None:
        self._telemetry = telemetry
        self._tenant = tenant
        self._clock = clock
        self._arrived = clock()
        self.trace: CallTrace | None = None
        if telemetry.is_tracing:
            facts = CallFacts(
                model=model,
                tenant=tenant,
                request_id=request_id,
                conversation_id=session or "",
                door=DOOR,
                stream=None,
                max_tokens=None,
                cache="",
                operation=EMBEDDINGS,
            )
            self.trace = telemetry.trace_call(facts, client, 0.0)

    def refused(self, exc: Exception, provider: Callable[[], str | None]) -> None:
        """The call was refused before its upstream call (its input, quota or model);
        `provider`: the `gen_ai.provider.name` of the backend that would have served it, asked
        only while tracing."""
        if self.trace is not None:
            elapsed = self._clock() - self._arrived
            named = provider()
            attrs = None if named is None else {ga.GEN_AI_PROVIDER_NAME: named}
            ending = Ending("rejected", type(exc).__name__, Usage(), 0.0, elapsed)
            self.trace.end(replace(ending, attributes=attrs))

    def begin(self, candidate: Candidate) -> dict[str, str] | None:
        """The upstream call's client span begun; the headers that carry its context."""
        if self.trace is None:
            return None
        facts = AttemptFacts(
            0,
            backend_provider(candidate.backend),
            candidate.backend_name,
            candidate.venue,
            candidate.replica,
            candidate.server,
        )
        return self.trace.begin_attempt(facts, time.time_ns())

    def end(
        self,
        route: str,
        candidate: Candidate,
        usage: Usage,
        cost_usd: float,
        began: float,
        status: str,
        error_kind: str | None,
        asked: Mapping[str, JSON],
        reply: Mapping[str, JSON] | None,
    ) -> None:
        """The upstream call ended with `status` (`ok`: answered with `reply`): the metrics of
        the attempt, and its span and the call's ended. `asked`: the client's body. Never
        raises: a call that was served (settled, recorded) is answered whatever its telemetry
        does, as a chat call's bookkeeping after its reply is."""
        try:
            now = self._clock()
            provider = backend_provider(candidate.backend)
            trace = self.trace
            self._telemetry.metrics.record_attempt(
                AttemptMetrics(
                    CallLabels(self._tenant, route, candidate.backend_name, provider),
                    status,
                    usage,
                    cost_usd,
                    now - began,
                    None,
                    error_kind,
                    None if trace is None else trace.trace_id,
                    EMBEDDINGS,
                )
            )
            if trace is not None:
                ending = Ending(
                    status, error_kind, usage, cost_usd, 0.0, None, *_answer(asked, reply)
                )
                trace.end_attempt(0, replace(ending, duration_s=now - began))
                trace.end(replace(ending, duration_s=now - self._arrived))
        except Exception:  # noqa: BLE001 - telemetry must not fail the call it describes
            log.exception("embeddings telemetry failed")


def _answer(
    asked: Mapping[str, JSON], reply: Mapping[str, JSON] | None
) -> tuple[str | None, None, None, dict[str, AttributeValue]]:
    """An ending's response model, finish reason, content and attributes: the upstream's model
    name, the vectors' dimension and the encoding the client asked for."""
    attrs: dict[str, AttributeValue] = {}
    encoding = asked.get("encoding_format")
    if isinstance(encoding, str):
        attrs[ga.GEN_AI_REQUEST_ENCODING_FORMATS] = (encoding,)
    dimensions = None if reply is None else dimension_count(reply)
    if dimensions is not None:
        attrs[ga.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] = dimensions
    model = None if reply is None else reply.get("model")
    return (model if isinstance(model, str) else None), None, None, attrs
