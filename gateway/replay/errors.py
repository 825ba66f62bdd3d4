"""Errors of keyed model calls, with the same codes as the tool-run API (docs/sandbox.md); the
doors map them into each client's own error shape (gateway/http/errors.py)."""

from __future__ import annotations

from gateway.errors import GatewayError, RequestRejected

HEADER = "Idempotency-Key"


class IdempotencyKeyInvalid(RequestRejected):
    """Empty, too long, or not printable ASCII (400)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{HEADER}: {reason}", rule="idempotency_key_invalid", field=HEADER)


class IdempotencyKeyReused(GatewayError):
    """Same key, different request (IETF draft: 422); the key stays with its first request."""

    status_code = 422

    def __init__(self) -> None:
        message = "this Idempotency-Key was used with a different request"
        super().__init__(message, rule="idempotency_key_reused", field=HEADER)


class IdempotencyKeyInUse(GatewayError):
    """The first request with this key is still running and did not finish within the wait
    (409 with Retry-After); a retry gets its reply once stored."""

    status_code = 409
    anthropic_type = "invalid_request_error"
    retry_after_s = 1

    def __init__(self) -> None:
        message = "a request with this Idempotency-Key is still running; retry shortly"
        super().__init__(message, rule="idempotency_key_in_use", field=HEADER)


class ReplyNotStored(GatewayError):
    """The key's reply was served but was over the size cap, so it cannot be replayed; it is
    not run a second time either (410)."""

    status_code = 410

    def __init__(self, max_bytes: int) -> None:
        message = (
            f"the reply to this Idempotency-Key was larger than {max_bytes} bytes and was not "
            "stored; it is not run again"
        )
        super().__init__(message, rule="idempotency_reply_not_stored", field=HEADER)


class ReplayStoreUnavailable(GatewayError):
    """The store of keyed replies does not answer: nothing ran, retry later (503)."""

    status_code = 503
    openai_type = "service_unavailable"
    anthropic_type = "overloaded_error"
    retry_after_s = 1

    def __init__(self) -> None:
        message = "the idempotency store does not answer; nothing ran, retry shortly"
        super().__init__(message, rule="idempotency_store_unavailable", field=HEADER)
