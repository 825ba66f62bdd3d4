"""One JSON-over-HTTP upstream endpoint: POST a body, get JSON or SSE data back, and map every
transport failure and HTTP status to the typed errors of `adapters.errors`.

Shared by the OpenAI-compatible and Anthropic backends; knows no wire schema.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import httpx
import orjson

from adapters.errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    UpstreamError,
)
from adapters.sse import SSEParser, SSEvent


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from `retry-after-ms`, `retry-after` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _error_object(body: bytes) -> dict[str, Any]:
    """The `error` object of an OpenAI (`{"error": {...}}`) or Anthropic (`{"type": "error",
    "error": {...}}`) error body; empty when the body is neither."""
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}


def status_error(
    backend: str, status: int, headers: Mapping[str, str], body: bytes
) -> UpstreamError:
    """429 -> rate limited, 408 -> timeout, 5xx (and Anthropic's 529) -> unavailable,
    any other 4xx -> rejected (never retried); each carries what the provider said."""
    error = _error_object(body)
    message = error.get("message")
    if isinstance(message, str):
        detail = f"HTTP {status}: {message}"
    else:
        detail = f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"
    exc: UpstreamError
    if status == 429:
        exc = ProviderRateLimited(backend, detail, status, parse_retry_after(headers))
    elif status == 408:
        exc = ProviderTimeout(backend, detail, status)
    elif status >= 500:
        exc = ProviderUnavailable(backend, detail, status)
    else:
        exc = ProviderRejected(backend, detail, status)
    request_id = headers.get("x-request-id") or headers.get("request-id")
    exc.provider = ProviderError.read(error, request_id)
    return exc


def transport_error(backend: str, exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return ProviderTimeout(backend, f"timed out ({type(exc).__name__})")
    return ProviderUnavailable(backend, f"{type(exc).__name__}: {exc}")


def json_reply(backend: str, status: int, headers: Mapping[str, str], content: bytes) -> Any:
    """A finished JSON reply: the typed error of its status (400+), else its decoded body."""
    if status >= 400:
        raise status_error(backend, status, headers, content)
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        raise ProviderUnavailable(backend, "reply is not JSON", status) from exc


class ReadsAsEvents(abc.ABC):
    """`post_sse` of an upstream from its `post_sse_reads`: the same events, one at a time."""

    @abc.abstractmethod
    def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """The events completed by each read, one non-empty list per read."""

    async def post_sse(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[SSEvent]:
        """SSE events as they arrive (the timeouts are `post_sse_reads`')."""
        async for events in self.post_sse_reads(body, timeout_s=timeout_s, headers=headers):
            for event in events:
                yield event


class Upstream(Protocol):
    """One upstream endpoint: POST a JSON body, get JSON back or a stream of SSE events."""

    async def post_json(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Any: ...

    def post_sse(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[SSEvent]: ...

    def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """`post_sse`'s events grouped by the read that completed them (non-empty lists)."""
        ...


class UpstreamPool(Protocol):
    """A process-wide connection pool: it picks the client for an upstream URL (by its scheme)
    once, when a backend is built. `Http1Pool` is the gateway's (its own HTTP/1.1 client for
    `http://`, aiohttp for TLS); `AiohttpPool` and `HttpxPool` serve every scheme."""

    def upstream(self, backend: str, url: str, headers: Mapping[str, str]) -> Upstream: ...


HTTPClient = UpstreamPool


class HttpxPool:
    """An `httpx.AsyncClient` (its owner closes it) as an upstream pool."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    def upstream(self, backend: str, url: str, headers: Mapping[str, str]) -> Upstream:
        return HTTPUpstream(backend, self.client, url, headers)


class HTTPUpstream(ReadsAsEvents):
    """POSTs to one URL through the shared connection pool, with a per-call timeout; `post_sse`'s
    `timeout_s` bounds the wait for each read."""

    def __init__(
        self, backend: str, http: httpx.AsyncClient, url: str, headers: Mapping[str, str]
    ) -> None:
        self._backend = backend
        self._http = http
        self._url = url
        self._headers = dict(headers)

    def _merged(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        return {**self._headers, **headers} if headers else self._headers

    async def post_json(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Any:
        """The decoded JSON reply; the whole exchange must finish within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                resp = await self._http.post(
                    self._url,
                    content=body,
                    headers=self._merged(headers),
                    timeout=httpx.Timeout(timeout_s),
                )
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self._backend, exc) from exc
        return json_reply(self._backend, resp.status_code, resp.headers, resp.content)

    async def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """The events completed by each chunk read, one non-empty list per chunk."""
        parser = SSEParser()
        try:
            async with self._http.stream(
                "POST",
                self._url,
                content=body,
                headers=self._merged(headers),
                timeout=httpx.Timeout(timeout_s),
            ) as resp:
                if resp.status_code >= 400:
                    content = await resp.aread()
                    raise status_error(self._backend, resp.status_code, resp.headers, content)
                async for chunk in resp.aiter_bytes():
                    events = parser.feed(chunk)
                    if events:
                        yield events
            events = parser.close()
            if events:
                yield events
        except httpx.HTTPError as exc:
            raise transport_error(self._backend, exc) from exc
