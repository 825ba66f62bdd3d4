"""Client-side CPU per upstream call: Lantern's backends vs LiteLLM's SDK, side by side, same fake
upstream (a separate process), same agent-sized body (~30 KB, tools, tool results).

    .venv/bin/python bench/backend_cpu.py [--calls 200]

Measures this process's CPU (time.process_time) over sequential calls, so the upstream's own
work is excluded; also the pure codec costs (decode a 30 KB body, translate it, re-encode one
SSE chunk). Prints one table; ratios are LiteLLM / Lantern.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from adapters.backend import Backend, BackendCall
from adapters.backends import BackendSpec, build_backend
from adapters.http.aiohttp_pool import AiohttpPool
from adapters.http.http1.pool import Http1Pool
from adapters.http.upstream import HttpxPool
from adapters.types import TextDelta
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.openai import OpenAIStreamDecoder, OpenAIStreamEncoder
from bench._procs import PY, free_port, start, stop


def agent_body(stream: bool) -> dict[str, Any]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "A tool the agent may call. " * 8,
                "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
            },
        }
        for i in range(10)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. " * 40}
    ]
    for step in range(7):
        listing = "\n".join(f"{n:4d}  value_{n} = compute({n}, step={step})" for n in range(60))
        messages += [
            {"role": "user", "content": f"Step {step}: read the next file."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{step}",
                        "type": "function",
                        "function": {"name": "tool_1", "arguments": '{"arg": "file.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{step}", "content": listing},
        ]
    messages.append({"role": "user", "content": "Summarise. words:20"})
    body: dict[str, Any] = {"model": "gpt-4o-mini", "max_tokens": 64, "tools": tools}
    body["messages"] = messages
    if stream:
        body["stream"] = True
    return body


def cpu_ms_per_call(n: int, fn: Callable[[], Any]) -> float:
    fn()  # warm caches
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) * 1000 / n


async def backend_cpu_ms(backend: Backend, call: BackendCall, n: int, stream: bool) -> float:
    async def once() -> None:
        if stream:
            async for _ in backend.stream(call):
                pass
        else:
            await backend.complete(call)

    for _ in range(5):
        await once()
    started = time.process_time()
    for _ in range(n):
        await once()
    return (time.process_time() - started) * 1000 / n


async def backends(base: str, n: int) -> list[tuple[str, float, float, float, float]]:
    rows = []
    spec = BackendSpec("ours", "openai_compatible", f"{base}/v1")
    pool = Http1Pool()  # the gateway's: its own HTTP/1.1 client for http:// upstreams
    aio = AiohttpPool()
    async with httpx.AsyncClient() as http:
        on_httpx = build_backend(spec, http=HttpxPool(http))
        on_aiohttp = build_backend(spec, http=aio)
        on_http1 = build_backend(spec, http=pool)
        theirs = build_backend(
            BackendSpec(
                "litellm", "litellm", f"{base}/v1", model="openai/gpt-4o-mini", api_key="sk-bench"
            ),
            http=HttpxPool(http),
        )
        for stream in (False, True):
            body = agent_body(stream)
            call = BackendCall(openai_wire.decode_request(body), "openai", body)
            ours = (on_httpx, on_aiohttp, on_http1, theirs)
            a, b, c, d = [await backend_cpu_ms(x, call, n, stream) for x in ours]
            rows.append(("stream" if stream else "non-stream", a, b, c, d))
    await pool.aclose()
    await aio.aclose()
    return rows


def codec_rows(n: int) -> list[tuple[str, float]]:
    body = agent_body(False)
    req = openai_wire.decode_request(body)
    encoder = OpenAIStreamEncoder(include_usage=True, created=1)
    decoder = OpenAIStreamDecoder()
    chunk = encoder.encode(TextDelta(0, " token"))[6:-2].decode()
    decoder.feed(chunk)

    def chunk_round_trip() -> None:
        for event in decoder.feed(chunk):
            encoder.encode(event)

    return [
        (
            "decode_request (30 KB OpenAI body)",
            cpu_ms_per_call(n, lambda: openai_wire.decode_request(body)),
        ),
        (
            "OpenAI -> Anthropic request translation",
            cpu_ms_per_call(n, lambda: anthropic_wire.encode_request(req)),
        ),
        ("SSE chunk decode + re-encode", cpu_ms_per_call(n * 50, chunk_round_trip)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    port = free_port()
    fake = start(
        [PY, "-m", "tests.fakes.upstream", "--port", str(port), "--reply-words", "20"],
        f"http://127.0.0.1:{port}/health",
    )
    try:
        rows = asyncio.run(backends(f"http://127.0.0.1:{port}", args.calls))
    finally:
        stop(fake)
    print(f"body: {len(str(agent_body(False)))} chars, {args.calls} sequential calls per cell")
    print(
        "| call | Lantern on httpx | Lantern on aiohttp | Lantern on Http1Pool | LiteLLM SDK "
        "| LiteLLM / httpx | LiteLLM / aiohttp | LiteLLM / Http1Pool |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, on_httpx, on_aiohttp, on_http1, theirs in rows:
        print(
            f"| {name} | {on_httpx:.3f} | {on_aiohttp:.3f} | {on_http1:.3f} | {theirs:.3f} "
            f"| {theirs / on_httpx:.1f}x | {theirs / on_aiohttp:.1f}x | {theirs / on_http1:.1f}x |"
        )
    print()
    print("| codec step | CPU ms |")
    print("|---|---|")
    for name, ms in codec_rows(args.calls):
        print(f"| {name} | {ms:.4f} |")


if __name__ == "__main__":
    main()
