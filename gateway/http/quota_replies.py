"""Quota rejections as HTTP: 429 + Retry-After + x-ratelimit-*, 400 for never-fits, 503 store down."""

from __future__ import annotations

import math

from adapters.types import WireFormat
from gateway.core.admission import rate_limit_headers
from gateway.http.error_shapes import HttpError, error_body
from quotas.errors import LimitNeverFits, QuotaExceeded, QuotaStoreUnavailable


def quota_to_http(exc: Exception, wire: WireFormat) -> HttpError | None:
    if isinstance(exc, QuotaExceeded):
        message = (
            f"rate limit exceeded: {exc.limit} is {exc.limit_value:g}, current use "
            f"{exc.current:g}; retry after {exc.retry_after_s:.1f}s"
        )
        body = error_body(wire, "rate_limit_exceeded", "rate_limit_error", message, exc.limit, None)
        retry = str(max(1, math.ceil(exc.retry_after_s)))
        headers = {"retry-after": retry, "x-lantern-limit": exc.limit, **rate_limit_headers(exc)}
        return HttpError(429, body, headers)
    if isinstance(exc, LimitNeverFits):
        message = (
            f"request can never fit: {exc.limit} is {exc.limit_value:g}, "
            f"this call needs {exc.requested:g}"
        )
        kind = "invalid_request_error"
        return HttpError(400, error_body(wire, kind, kind, message, exc.limit, None))
    if isinstance(exc, QuotaStoreUnavailable):
        message = "quota store unavailable and tenant policy is fail_closed"
        body = error_body(
            wire,
            "service_unavailable",
            "overloaded_error",
            message,
            "quota_store_unavailable",
            None,
        )
        return HttpError(503, body, {"retry-after": "1"})
    return None
