"""Gateway errors and the one place where any error becomes an HTTP reply.

Each client gets its own error shape: OpenAI `{"error": {...}}`, Anthropic
`{"type": "error", "error": {...}}`. Nothing here branches on message text.
"""

from __future__ import annotations

from adapters.errors import ProviderRateLimited, UpstreamError, WireFormatError
from adapters.routing_types import NoRouteAvailable
from adapters.types import WireFormat
from gateway.error_shapes import HttpError, error_body
from gateway.quota_http import quota_to_http


class GatewayError(Exception):
    status_code = 400
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"

    def __init__(self, message: str, *, rule: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.rule = rule
        self.field = field


class AuthenticationFailed(GatewayError):
    status_code = 401
    anthropic_type = "authentication_error"

    def __init__(self, message: str = "missing or invalid API key") -> None:
        super().__init__(message, rule="api_key")


class PermissionDenied(GatewayError):
    status_code = 403
    openai_type = "permission_error"
    anthropic_type = "permission_error"


class UnknownModel(GatewayError):
    status_code = 404
    openai_type = "invalid_request_error"
    anthropic_type = "not_found_error"

    def __init__(self, model: str) -> None:
        super().__init__(f"model '{model}' does not exist", rule="model_not_found", field="model")


class RequestRejected(GatewayError):
    """The request breaks a rule that waiting cannot fix (400)."""


class BodyTooLarge(GatewayError):
    """The body is over `http.max_body_bytes` (413, Anthropic's `request_too_large`)."""

    status_code = 413
    anthropic_type = "request_too_large"

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            f"request body is larger than the gateway's limit of {max_bytes} bytes",
            rule="max_body_bytes",
            field="body",
        )


class ClientGone(GatewayError):
    """The client closed the connection (or was closed at a read deadline) before its body
    was complete: nobody will read the reply (499, as nginx logs it)."""

    status_code = 499

    def __init__(self) -> None:
        super().__init__("client closed the connection before the body was complete")


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
