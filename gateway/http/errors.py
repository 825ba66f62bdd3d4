"""Any error as the reply its client expects: OpenAI `{"error": {...}}`, Anthropic
`{"type": "error", "error": {...}}`, with status, rule and field. Nothing here branches on
message text.
"""

from __future__ import annotations

from adapters.errors import BACKEND_SIDE_4XX, ProviderRateLimited, UpstreamError, WireFormatError
from adapters.types import WireFormat
from gateway.errors import GatewayError
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


# Anthropic's error types that speak of the request or the provider's load; the others
# (authentication, permission, not found, billing) speak of the gateway's own account
_RELAYED_ANTHROPIC_TYPES = frozenset(
    {"invalid_request_error", "request_too_large", "rate_limit_error", "api_error"}
    | {"overloaded_error", "timeout_error"}
)
_REQUEST_ID_HEADER: dict[WireFormat, str] = {"openai": "x-request-id", "anthropic": "request-id"}


def _upstream_to_http(exc: UpstreamError, wire: WireFormat) -> HttpError:
    """The provider's own `type`, `code`, `param` and request id where it gave them, unless
    its refusal is about the gateway's account (401, 403, 404: not the client's to fix)."""
    kind_o, kind_a = _upstream_kind(exc)
    rule, param, headers = "upstream", None, {}
    said = exc.provider
    if said is not None and exc.upstream_status not in BACKEND_SIDE_4XX:
        kind_o = said.type or kind_o
        kind_a = said.type if said.type in _RELAYED_ANTHROPIC_TYPES else kind_a
        rule, param = said.code or rule, said.param
    if said is not None and said.request_id is not None:
        headers[_REQUEST_ID_HEADER[wire]] = said.request_id
    if isinstance(exc, ProviderRateLimited) and exc.retry_after_s is not None:
        headers["retry-after"] = str(max(1, round(exc.retry_after_s)))
    message = f"upstream {exc.backend} failed: {exc.detail}"
    body = error_body(wire, kind_o, kind_a, message, rule, param)
    return HttpError(exc.status_code, body, headers)


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
        wait = exc.retry_after_s
        return HttpError(exc.status_code, body, {"retry-after": str(wait)} if wait else {})
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
        return _upstream_to_http(exc, wire)
    body = error_body(wire, "api_error", "api_error", "internal error", "internal", None)
    return HttpError(500, body)
