"""AWS errors (botocore's structured codes) → the adapters' error hierarchy.

Never branches on message text; botocore is imported only when an error is mapped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    UpstreamError,
)

_RATE = {"ThrottlingException"}
_TIMEOUT = {"ModelTimeoutException"}
_UNAVAILABLE = {
    "ServiceUnavailableException",
    "InternalServerException",
    "ModelNotReadyException",
    "ModelErrorException",
    "ModelStreamErrorException",
}


def map_error(backend: str, exc: BaseException) -> UpstreamError:
    """AWS error codes (structured, never message text) → the adapters' error hierarchy."""
    from botocore import exceptions as bx

    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, bx.ClientError):
        mapped = _client_error(backend, exc.response)
        # AWS's id of the call; its error code is no type or code either client knows
        request_id = exc.response.get("ResponseMetadata", {}).get("RequestId")
        mapped.provider = ProviderError.read({}, request_id)
        return mapped
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectTimeoutError | TimeoutError):
        return ProviderTimeout(backend, type(exc).__name__)
    if isinstance(exc, bx.BotoCoreError):  # connection errors, missing credentials, ...
        return ProviderUnavailable(backend, type(exc).__name__)
    return ProviderUnavailable(backend, f"{type(exc).__name__}: {exc}")


def _client_error(backend: str, response: Mapping[str, Any]) -> UpstreamError:
    error = response.get("Error", {})
    code = str(error.get("Code", ""))
    code = code[:1].upper() + code[1:]  # stream exceptions arrive as throttlingException
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    detail = f"{code}: {error.get('Message', '')}"
    if code in _RATE:
        return ProviderRateLimited(backend, detail, status or 429)
    if code in _TIMEOUT:
        return ProviderTimeout(backend, detail, status)
    if code in _UNAVAILABLE or (status or 0) >= 500:
        return ProviderUnavailable(backend, detail, status)
    return ProviderRejected(backend, detail, status)
