"""The W3C trace context a client sends (`traceparent`, `tracestate`), read only while tracing;
the span of a call refused before it was admitted, and of a door call that runs no inference."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.core.attempts import backend_provider, refused
from gateway.core.calls import IncomingCall
from gateway.core.pipeline import PipelineParts
from gateway.http.auth import Caller
from gateway.ports import ModelTable
from gateway.telemetry import ClientTrace, OperationTrace, Telemetry, operations
from gateway.telemetry.genai import CHAT


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


def trace_refusal(
    parts: PipelineParts,
    call: IncomingCall | None,
    exc: Exception,
    unread: Unread | None = None,
) -> None:
    """A call refused at admission (quota, policy, its prompt's size), while tracing: a span
    in the client's trace whose `error.type` says why, with the provider that would have
    served it; one refused before its body was read into a call (`unread`: who sent it) is
    named by its operation alone. Nothing for a caller that was not authenticated. Run only
    on the refusal's path."""
    telemetry = parts.telemetry
    if not telemetry.is_tracing:
        return
    if call is not None:
        provider = serving_provider(parts.models, call)
        refused(telemetry, call, type(exc).__name__, 0.0, provider)
    elif unread is not None and unread.caller is not None:
        client = client_trace(unread.headers)
        trace = telemetry.trace_operation(unread.caller.tenant.tenant, unread.door, client)
        trace.end(operations.unread(unread.operation, type(exc).__name__))


@dataclass(frozen=True, slots=True)
class Unread:
    """Who sent a call whose body did not become one, and at which door (`lantern.door`) and
    operation (`gen_ai.operation.name`)."""

    caller: Caller | None  # None: refused before it was authenticated
    headers: Mapping[str, str]
    door: str
    operation: str = CHAT


def operation_trace(
    telemetry: Telemetry, headers: Mapping[str, str], tenant: str, door: str
) -> OperationTrace | None:
    """While tracing, the span of a door call that runs no inference, in the client's trace;
    else None, and nothing is read."""
    if not telemetry.is_tracing:
        return None
    return telemetry.trace_operation(tenant, door, client_trace(headers))


def serving_provider(models: ModelTable, call: IncomingCall) -> str | None:
    """The `gen_ai.provider.name` of the backend that would serve `call`: its route's first
    that the tenant may use; None when there is none."""
    route = models.get(call.request.model)
    allowed = call.tenant.backends
    for candidate in () if route is None else route.candidates:
        if allowed is None or candidate.backend_name in allowed:
            return backend_provider(candidate.backend)
    return None
