"""Streaming `/v1/completions` client for bench/engine.py: one timed request, or many at once.

Speaks the OpenAI completions wire (token-id prompts, SSE) to llama-server and Lantern's engine;
records per-request first-token time, decode rate and token counts. Measures, never asserts.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

REQUEST_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible server and the extra body fields it needs for forced-length greedy."""

    name: str
    base_url: str
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        return {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.extra,
        }


def llama_target(port: int) -> Target:
    # n_predict overrides max_tokens in llama-server; cache_prompt keeps a slot's KV for reuse.
    return Target("llama-server", f"http://127.0.0.1:{port}", {"cache_prompt": True})


def lantern_target(port: int) -> Target:
    return Target("lantern", f"http://127.0.0.1:{port}")


@dataclass(frozen=True)
class Completion:
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    ttft_s: float  # send -> first streamed token
    total_s: float  # send -> stream end
    decode_s: float  # first -> last streamed token

    @property
    def decode_tok_s(self) -> float:
        return (self.output_tokens - 1) / self.decode_s if self.decode_s > 0 else 0.0


@dataclass(frozen=True)
class Batch:
    wall_s: float
    completions: tuple[Completion, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.completions)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.completions)

    @property
    def total_tok_s(self) -> float:
        return (self.prompt_tokens + self.output_tokens) / self.wall_s

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.wall_s


class StreamBroken(RuntimeError):
    """The server answered with an error status or a stream without any token."""


async def complete(
    client: httpx.AsyncClient, target: Target, prompt: list[int], max_tokens: int
) -> Completion:
    body = target.body(prompt, max_tokens)
    started = time.perf_counter()
    stamps: list[float] = []
    usage: dict[str, Any] = {}
    url = f"{target.base_url}/v1/completions"
    async with client.stream("POST", url, json=body, timeout=REQUEST_TIMEOUT_S) as response:
        if response.status_code != 200:
            detail = (await response.aread())[:300]
            raise StreamBroken(f"{target.name}: HTTP {response.status_code}: {detail!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                stamps.append(time.perf_counter())
            usage = chunk.get("usage") or usage
    ended = time.perf_counter()
    if not stamps:
        raise StreamBroken(f"{target.name}: stream carried no token")
    details = usage.get("prompt_tokens_details") or {}
    return Completion(
        prompt_tokens=int(usage.get("prompt_tokens", len(prompt))),
        output_tokens=int(usage.get("completion_tokens", len(stamps))),
        cached_tokens=int(details.get("cached_tokens") or 0),
        ttft_s=stamps[0] - started,
        total_s=ended - started,
        decode_s=stamps[-1] - stamps[0],
    )


async def run_batch(target: Target, prompts: list[list[int]], max_tokens: int) -> Batch:
    """All prompts sent at once; wall time from the first send to the last stream's end."""
    limits = httpx.Limits(max_connections=len(prompts) + 2)
    async with httpx.AsyncClient(limits=limits) as client:
        started = time.perf_counter()
        done = await asyncio.gather(*(complete(client, target, p, max_tokens) for p in prompts))
        return Batch(time.perf_counter() - started, tuple(done))


async def run_one(target: Target, prompt: list[int], max_tokens: int) -> Completion:
    async with httpx.AsyncClient() as client:
        return await complete(client, target, prompt, max_tokens)
