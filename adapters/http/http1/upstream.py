"""The upstream endpoint of a plain `http://` URL (a self-hosted engine: the bundled one, vLLM,
SGLang) over our own keep-alive connections (`adapters.http.http1.connection`). Per POST of an agent-sized body,
a third of aiohttp's CPU with caches cold between calls (~130 against ~450 µs at 100 calls/s):
that CPU is on the call's critical path. Same port, same timeouts and error mapping as
`AiohttpUpstream` (which still serves `https://`); knows no wire schema.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from adapters.http.http1.connection import ConnectionSource, Http1Connection
from adapters.http.upstream import (
    ReadsAsEvents,
    json_reply,
    status_error,
    transport_error,
)
from adapters.sse import SSEParser, SSEvent

# aiohttp's rule (RFC 9110 5.5): no control characters but tab in a header name or value
_FORBIDDEN_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def is_plain_http(url: str) -> bool:
    """True for an `http://` URL without credentials in it (those stay with aiohttp)."""
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.username is None and parts.password is None


def header_lines(headers: Mapping[str, str]) -> bytes:
    """`name: value\\r\\n` per header, UTF-8 as aiohttp writes them; a control character in a
    name or value raises ValueError, as aiohttp does (a session id may come from a JSON body)."""
    lines = []
    for name, value in headers.items():
        if _FORBIDDEN_HEADER_CHARS.search(name) or _FORBIDDEN_HEADER_CHARS.search(value):
            raise ValueError(
                "Forbidden control character detected in headers. "
                "Potential header injection attack."
            )
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("utf-8")


class Http1Upstream(ReadsAsEvents):
    """POSTs to one `http://` URL through the shared `Http1Pool`, with a per-call timeout (for
    SSE: `timeout_s` bounds the connect and each read)."""

    def __init__(
        self, backend: str, pool: ConnectionSource, url: str, headers: Mapping[str, str]
    ) -> None:
        if not is_plain_http(url):
            raise ValueError(f"backend {backend}: Http1Upstream serves http:// URLs, not {url!r}")
        parts = urlsplit(url)
        self._backend = backend
        self._pool = pool
        self._host = parts.hostname or "localhost"
        self._port = parts.port or 80
        self._headers = {k.lower(): v for k, v in headers.items()}
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._start = f"POST {target} HTTP/1.1\r\nhost: {parts.netloc}\r\n".encode()
        self._fixed = self._start + header_lines(self._headers)

    def _head(self, headers: Mapping[str, str] | None, num_bytes: int) -> bytes:
        """The request head: start line, host, the backend's headers with the call's on top."""
        if not headers:
            lines = self._fixed
        elif self._headers.keys().isdisjoint(k.lower() for k in headers):
            lines = self._fixed + header_lines(headers)
        else:
            merged = {**self._headers, **{k.lower(): v for k, v in headers.items()}}
            lines = self._start + header_lines(merged)
        return lines + b"content-length: %d\r\n\r\n" % num_bytes

    async def post_json(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Any:
        """The decoded JSON reply; the whole exchange must finish within `timeout_s`."""
        head = self._head(headers, len(body))
        conn: Http1Connection | None = None
        started = time.monotonic()
        try:
            conn = await self._pool.acquire(self._host, self._port, timeout_s)
            conn.expire_after(timeout_s - (time.monotonic() - started))
            conn.send(head, body)
            await conn.head()
            content = await conn.read_all()
            status, reply_headers = conn.status, conn.headers
        except (OSError, TimeoutError) as exc:
            raise transport_error(self._backend, exc) from exc
        finally:
            if conn is not None:
                self._pool.release(conn, self._host, self._port)
        return json_reply(self._backend, status, reply_headers, content)

    async def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """The events completed by each read of the socket, one non-empty list per read (reads
        the relay has not taken yet are joined, as aiohttp's `iter_any` does)."""
        head = self._head(headers, len(body))
        parser = SSEParser()
        conn: Http1Connection | None = None
        try:
            conn = await self._pool.acquire(self._host, self._port, timeout_s)
            conn.send(head, body)
            await conn.head(timeout_s)
            if conn.status >= 400:
                content = await conn.read_all(timeout_s)
                raise status_error(self._backend, conn.status, conn.headers, content)
            while (chunk := await conn.read_some(timeout_s)) is not None:
                events = parser.feed(chunk)
                if events:
                    yield events
            events = parser.close()
            if events:
                yield events
        except (OSError, TimeoutError) as exc:
            raise transport_error(self._backend, exc) from exc
        finally:
            if conn is not None:
                self._pool.release(conn, self._host, self._port)
