"""The Responses door's own errors; `gateway/http/errors.py` maps them with the rest."""

from __future__ import annotations

from gateway.errors import GatewayError


class ResponseNotFound(GatewayError):
    """No response with this id for this tenant: never stored, expired, deleted, or another
    tenant's (which must look exactly like one that does not exist)."""

    status_code = 404
    anthropic_type = "not_found_error"

    def __init__(self, response_id: str, field: str | None = None) -> None:
        super().__init__(
            f"Response with id '{response_id}' not found.", rule="response_not_found", field=field
        )


class ResponseStoreUnavailable(GatewayError):
    """The shared store of responses does not answer (Redis down or unreachable): nothing was
    read, reserved or sent upstream; retry later (503)."""

    status_code = 503
    openai_type = "service_unavailable"
    anthropic_type = "overloaded_error"
    retry_after_s = 1

    def __init__(self) -> None:
        message = "the store of responses does not answer; nothing ran, retry shortly"
        super().__init__(message, rule="response_store_unavailable")
