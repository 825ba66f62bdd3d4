"""Quota rejections as HTTP: 429 + Retry-After + x-ratelimit-*, 400 for never-fits, 503 store down."""

from __future__ import annotations

import math

from adapters.types import WireFormat
from quotas.errors import LimitNeverFits, QuotaExceeded, QuotaStoreUnavailable


def quota_to_http(exc: Exception, wire: WireFormat):  # -> HttpError | None (import cycle)
    from gateway.admission import rate_limit_headers
    from gateway.errors import HttpError

    if isinstance(exc, QuotaExceeded):
        message = (
            f"rate limit exceeded: {exc.limit} is {exc.limit_value:g}, current use "
            f"{exc.current:g}; retry after {exc.retry_after_s:.1f}s"
        )
        retry = str(max(1, math.ceil(exc.retry_after_s)))
        if wire == "anthropic":
            body: dict[str, object] = {
                "type": "error",
                "error": {"type": "rate_limit_error", "message": message},
            }
        else:
            body = {
                "error": {
                    "message": message,
                    "type": "rate_limit_exceeded",
                    "param": None,
                    "code": exc.limit,
                }
            }
        headers = {"retry-after": retry, "x-lantern-limit": exc.limit, **rate_limit_headers(exc)}
        return HttpError(429, body, headers)
    if isinstance(exc, LimitNeverFits):
        message = (
            f"request can never fit: {exc.limit} is {exc.limit_value:g}, "
            f"this call needs {exc.requested:g}"
        )
        if wire == "anthropic":
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        else:
            body = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": exc.limit,
                }
            }
        return HttpError(400, body)
    if isinstance(exc, QuotaStoreUnavailable):
        message = "quota store unavailable and tenant policy is fail_closed"
        if wire == "anthropic":
            body = {"type": "error", "error": {"type": "overloaded_error", "message": message}}
        else:
            body = {
                "error": {
                    "message": message,
                    "type": "service_unavailable",
                    "param": None,
                    "code": "quota_store_unavailable",
                }
            }
        return HttpError(503, body, {"retry-after": "1"})
    return None
