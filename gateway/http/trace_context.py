"""The W3C trace context a client sends (`traceparent`, `tracestate`), read only while tracing;
the span of a call refused before it was admitted."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gateway.core.attempts import refused
from gateway.core.calls import IncomingCall
from gateway.telemetry import ClientTrace, Telemetry


def client_trace(headers: Mapping[str, str]) -> ClientTrace | None:
    traceparent = headers.get("traceparent")
    if traceparent is None:
        return None
    return ClientTrace(traceparent, headers.get("tracestate"))


def with_client_trace(
    call: IncomingCall, headers: Mapping[str, str], telemetry: Telemetry
) -> IncomingCall:
    """`call` carrying the client's trace context, when calls are traced."""
    if not telemetry.is_tracing or (trace := client_trace(headers)) is None:
        return call
    return dataclasses.replace(call, trace=trace)


def trace_refusal(telemetry: Telemetry, call: IncomingCall | None, exc: Exception) -> None:
    """A call refused at admission (quota, policy, its prompt's size), while tracing: a span
    in the client's trace whose `error.type` says why. Run only on the refusal's path."""
    if call is not None and telemetry.is_tracing:
        refused(telemetry, call, type(exc).__name__, 0.0)
