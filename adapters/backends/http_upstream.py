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
from typing import TYPE_CHECKING, Any, Protocol, Union

import httpx
import orjson

from adapters.errors import (
    ProviderRateLimited,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    UpstreamError,
)
from adapters.sse import SSEParser, SSEvent

if TYPE_CHECKING:
    import aiohttp

    from adapters.backends.aiohttp_upstream import AiohttpPool
    from adapters.backends.http1_connection import Http1Pool


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


def _detail(status: int, body: bytes) -> str:
    try:
        error = orjson.loads(body).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return f"HTTP {status}: {error['message']}"
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}"


def status_error(
    backend: str, status: int, headers: Mapping[str, str], body: bytes
) -> UpstreamError:
    """429 -> rate limited, 408 -> timeout, 5xx (and Anthropic's 529) -> unavailable,
    any other 4xx -> rejected (never retried)."""
    detail = _detail(status, body)
    if status == 429:
        return ProviderRateLimited(backend, detail, status, parse_retry_after(headers))
    if status == 408:
        return ProviderTimeout(backend, detail, status)
    if status >= 500:
        return ProviderUnavailable(backend, detail, status)
    return ProviderRejected(backend, detail, status)


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


HTTPClient = Union[httpx.AsyncClient, "aiohttp.ClientSession", "AiohttpPool", "Http1Pool"]


def make_upstream(backend: str, http: HTTPClient, url: str, headers: Mapping[str, str]) -> Upstream:
    """httpx clients get HTTPUpstream; an aiohttp session (or AiohttpPool) gets the leaner
    AiohttpUpstream; an Http1Pool gets the leanest, Http1Upstream, for `http://` URLs and its
    aiohttp pool for the others (TLS)."""
    if isinstance(http, httpx.AsyncClient):
        return HTTPUpstream(backend, http, url, headers)
    from adapters.backends.aiohttp_upstream import AiohttpUpstream
    from adapters.backends.http1_connection import Http1Pool

    if isinstance(http, Http1Pool):
        from adapters.backends.http1_upstream import Http1Upstream, is_plain_http

        if is_plain_http(url):
            return Http1Upstream(backend, http, url, headers)
        return AiohttpUpstream(backend, http.tls, url, headers)
    return AiohttpUpstream(backend, http, url, headers)


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
