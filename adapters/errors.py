"""Errors raised by wire codecs and backends; the gateway maps them to HTTP in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AdapterError(Exception):
    """Base of everything `adapters/` raises on purpose."""


class WireFormatError(AdapterError):
    """The client's JSON does not follow its wire format. Maps to 400 naming the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ProviderError:
    """What a provider said of its own failure, as it said it: its error `type`, OpenAI's
    `code` and `param`, and the id it names the call by (`x-request-id`, `request-id`)."""

    type: str | None = None
    code: str | None = None
    param: str | None = None
    request_id: str | None = None

    @classmethod
    def read(cls, error: Mapping[str, Any], request_id: Any = None) -> ProviderError:
        """From the `error` object of either wire's error body (strings only; a number `code`
        as its text)."""
        code = error.get("code")
        if isinstance(code, int) and not isinstance(code, bool):
            code = str(code)
        return cls(
            _text(error.get("type")), _text(code), _text(error.get("param")), _text(request_id)
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class UpstreamError(AdapterError):
    """A backend failed. `retryable` says whether a fallback backend may be tried;
    `backend_fault` whether the failure says something about the backend's health (the fleet
    drains and cools down only on those), as opposed to a request the backend refused."""

    status_code = 502
    retryable = True
    backend_fault = True
    provider: ProviderError | None = None  # set where the provider's own error was read

    def __init__(self, backend: str, detail: str, upstream_status: int | None = None) -> None:
        super().__init__(f"{backend}: {detail}")
        self.backend = backend
        self.detail = detail
        self.upstream_status = upstream_status


class ProviderTimeout(UpstreamError):
    status_code = 504


class ProviderUnavailable(UpstreamError):
    """Connection refused, reset, or a 5xx from the provider."""

    status_code = 502


class ProviderRateLimited(UpstreamError):
    status_code = 429

    def __init__(
        self,
        backend: str,
        detail: str,
        upstream_status: int | None = 429,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(backend, detail, upstream_status)
        self.retry_after_s = retry_after_s


# 4xx statuses that say the backend is misconfigured or failing whoever sends the request
BACKEND_SIDE_4XX = frozenset({401, 403, 404, 408})


class ProviderRejected(UpstreamError):
    """A 4xx from the provider other than 429: never retried. The request itself is wrong
    (400, 413, 422: no fault of the backend) unless the status is in `BACKEND_SIDE_4XX` (a bad
    key, a model the backend does not serve: every call would fail the same way)."""

    status_code = 400
    retryable = False

    def __init__(self, backend: str, detail: str, upstream_status: int | None = None) -> None:
        super().__init__(backend, detail, upstream_status)
        self.backend_fault = upstream_status in BACKEND_SIDE_4XX


def malformed_reply(backend: str, exc: WireFormatError) -> ProviderUnavailable:
    """A reply of `backend` that breaks its wire's shape is its failure (502, tried elsewhere
    before any output), never the client's 400 for a request it did not get wrong."""
    return ProviderUnavailable(backend, f"malformed reply: {exc.field}: {exc.reason}")
