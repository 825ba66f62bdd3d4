"""Gateway errors: what went wrong, with the HTTP status, rule and field a client is told.

`gateway/http/errors.py` turns any of them (and the errors of the parts below) into the reply
shape of the client's door.
"""

from __future__ import annotations


class GatewayError(Exception):
    status_code = 400
    openai_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"
    retry_after_s: int | None = None  # set: the reply carries Retry-After

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


class KeyBudgetExhausted(GatewayError):
    """An issued API key spent its budget for the current day, week or month (429)."""

    status_code = 429
    openai_type = "insufficient_quota"
    anthropic_type = "rate_limit_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, rule="key_budget")


class UnknownModel(GatewayError):
    status_code = 404
    openai_type = "invalid_request_error"
    anthropic_type = "not_found_error"

    def __init__(self, model: str) -> None:
        super().__init__(f"model '{model}' does not exist", rule="model_not_found", field="model")


class RequestRejected(GatewayError):
    """The request breaks a rule that waiting cannot fix (400)."""


class EndpointNotServed(GatewayError):
    """A known API endpoint this gateway does not serve (400, naming the one to use)."""


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
