"""Any error as the reply its client expects: OpenAI `{"error": {...}}`, Anthropic
`{"type": "error", "error": {...}}`, with status, rule and field. Nothing here branches on
message text.
"""

from __future__ import annotations

from adapters.errors import ProviderRateLimited, UpstreamError, WireFormatError
from adapters.types import WireFormat
from gateway.errors import GatewayError
from gateway.fleet.admission_queue import QueueShed
from gateway.http.error_shapes import HttpError, error_body
from gateway.http.quota_replies import quota_to_http
from routing.types import NoRouteAvailable


def _upstream_kind(exc: UpstreamError) -> tuple[str, str]:
    if isinstance(exc, ProviderRateLimited):
        return "rate_limit_error", "rate_limit_error"
    if exc.status_code == 504:
        return "timeout", "api_error"
    if exc.status_code == 400:
        return "invalid_request_error", "invalid_request_error"
    return "api_error", "api_error"


def to_http(exc: Exception, wire: WireFormat) -> HttpError:
    """Map any exception raised while serving a call to its reply in the client's format."""
    quota = quota_to_http(exc, wire)
    if quota is not None:
        return quota
    if isinstance(exc, GatewayError):
        body = error_body(
            wire,
            exc.openai_type,
            exc.anthropic_type,
            exc.message,
            exc.rule,
            exc.field,
        )
        if isinstance(exc, QueueShed):  # waiting for a replica's slot would pass the bound
            return HttpError(429, body, {"retry-after": exc.retry_after_header})
        return HttpError(exc.status_code, body)
    if isinstance(exc, WireFormatError):
        body = error_body(
            wire,
            "invalid_request_error",
            "invalid_request_error",
            f"invalid request: {exc.field}: {exc.reason}",
            "invalid_request",
            exc.field,
        )
        return HttpError(400, body)
    if isinstance(exc, NoRouteAvailable):
        message = f"{exc}: every replica is drained or cooling down; retry shortly"
        body = error_body(
            wire, "service_unavailable", "overloaded_error", message, "no_route", "model"
        )
        return HttpError(503, body, {"retry-after": "5"})
    if isinstance(exc, UpstreamError):
        kind_o, kind_a = _upstream_kind(exc)
        message = f"upstream {exc.backend} failed: {exc.detail}"
        headers = {}
        if isinstance(exc, ProviderRateLimited) and exc.retry_after_s is not None:
            headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
        body = error_body(wire, kind_o, kind_a, message, "upstream", None)
        return HttpError(exc.status_code, body, headers)
    body = error_body(wire, "api_error", "api_error", "internal error", "internal", None)
    return HttpError(500, body)
