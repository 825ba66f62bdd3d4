"""`AiohttpPool`: a backend built before any loop runs works in each loop that uses it."""

from __future__ import annotations

import asyncio

from adapters.backend import BackendCall
from adapters.backends import BackendSpec, build_backend
from adapters.http.aiohttp_pool import AiohttpPool
from adapters.types import TextPart
from adapters.wire import openai as openai_wire
from tests.fakes.upstream import FakeUpstream

HI = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi words:4"}]}


def test_pool_serves_calls_in_successive_loops_and_closes() -> None:
    pool = AiohttpPool(max_connections=4)
    with FakeUpstream() as up:
        spec = BackendSpec("local", "openai_compatible", up.openai_base_url)
        backend = build_backend(spec, http=pool)  # no running loop yet, as in create_app
        call = BackendCall(openai_wire.decode_request(HI), "openai", HI)

        async def one() -> str:
            response = await backend.complete(call)
            stream = [e async for e in backend.stream(call)]
            assert stream  # the same session streams too
            part = response.content[0]
            assert isinstance(part, TextPart)
            return part.text

        assert asyncio.run(one()) == "The quick brown fox"  # first loop
        assert asyncio.run(one()) == "The quick brown fox"  # a second loop: a new session

        async def close() -> None:
            session = pool.session()
            await pool.aclose()
            assert session.closed

        asyncio.run(close())
        assert len(up.requests) == 4
