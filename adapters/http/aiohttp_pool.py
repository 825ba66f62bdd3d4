"""The same upstream endpoint as `HTTPUpstream`, over an `aiohttp.ClientSession`: about a third
of httpx's CPU per call (docs/bench/wire.md). Same error mapping; knows no wire schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from adapters.http.upstream import (
    ReadsAsEvents,
    Upstream,
    json_reply,
    status_error,
    transport_error,
)
from adapters.sse import SSEParser, SSEvent


class AiohttpPool:
    """A process-wide aiohttp session made on first use: aiohttp binds a session to the running
    loop, while backends are built before the loop starts. Its owner (the lifespan) closes it."""

    # Idle connections are dropped before the upstream drops them: uvicorn (vLLM, SGLang, the
    # bundled engine) closes idle keep-alives after 5 s, and a request written onto a connection
    # the server is closing fails with ServerDisconnected (seen as spurious 502s under load).
    def __init__(self, *, max_connections: int = 1000, keepalive_s: float = 4.0) -> None:
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        """The session of the running loop (a new one after `aclose()` or in another loop)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=self._keepalive_s
            )
            self._session, self._loop = aiohttp.ClientSession(connector=connector), loop
        return self._session

    def upstream(self, backend: str, url: str, headers: Mapping[str, str]) -> Upstream:
        return AiohttpUpstream(backend, self, url, headers)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session, self._loop = None, None


class AiohttpUpstream(ReadsAsEvents):
    """POSTs to one URL through a shared aiohttp session, with a per-call timeout (for SSE:
    `timeout_s` bounds the connect and each read)."""

    def __init__(
        self,
        backend: str,
        session: aiohttp.ClientSession | AiohttpPool,
        url: str,
        headers: Mapping[str, str],
    ) -> None:
        self._backend = backend
        self._pool = session if isinstance(session, AiohttpPool) else None
        self._fixed = session if isinstance(session, aiohttp.ClientSession) else None
        self._url = url
        self._headers = dict(headers)

    @property
    def _session(self) -> aiohttp.ClientSession:
        if self._pool is not None:
            return self._pool.session()
        assert self._fixed is not None
        return self._fixed

    def _merged(self, headers: Mapping[str, str] | None) -> dict[str, str]:
        return {**self._headers, **headers} if headers else self._headers

    async def post_json(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Any:
        """The decoded JSON reply; the whole exchange must finish within `timeout_s`."""
        try:
            async with self._session.post(
                self._url,
                data=body,
                headers=self._merged(headers),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                content = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(self._backend, exc) from exc
        return json_reply(self._backend, resp.status, resp.headers, content)

    async def post_sse_reads(
        self, body: bytes, *, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[list[SSEvent]]:
        """The events completed by each read of the socket, one non-empty list per read (a relay
        forwards what arrived together in one write)."""
        parser = SSEParser()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
        try:
            async with self._session.post(
                self._url, data=body, headers=self._merged(headers), timeout=timeout
            ) as resp:
                if resp.status >= 400:
                    content = await resp.read()
                    raise status_error(self._backend, resp.status, resp.headers, content)
                async for chunk in resp.content.iter_any():
                    events = parser.feed(chunk)
                    if events:
                        yield events
            events = parser.close()
            if events:
                yield events
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(self._backend, exc) from exc
