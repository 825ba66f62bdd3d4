"""Wire-level fake upstream: a real HTTP server speaking OpenAI chat completions and Anthropic
messages (JSON and SSE), with deterministic replies, error injection and a prompt-cache hook.

Replies reuse Lantern's own encoders, so the official SDKs parsing them also tests the encoders.
Run standalone for benchmarks: `python -m tests.fakes.upstream --port 18000`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import socket
import threading
from collections import deque
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import uvicorn

from adapters.errors import WireFormatError
from adapters.tokens import TokenCounter
from adapters.types import (
    ChatRequest,
    ChatResponse,
    Usage,
)
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.anthropic import AnthropicStreamEncoder
from adapters.wire.codec import codec_for
from adapters.wire.openai import OpenAIStreamEncoder
from tests.fakes.asgi_replies import (
    Receive,
    Send,
    error_body,
    error_type,
    read_body,
    respond,
    serve_today,
)
from tests.fakes.reply_plan import (
    SLOW,
    SLOW_CHUNK_S,
    STATUS,
    last_user_text,
    plan_reply,
    stream_events,
)
from tests.fakes.responses_api import serve_responses

Scope = MutableMapping[str, Any]


class PromptCacheModel(Protocol):
    def account(
        self, wire: str, body: dict[str, Any], prompt_tokens: int, api_key: str = ""
    ) -> tuple[int, int, int]:
        """(uncached_input_tokens, cache_read_tokens, cache_write_tokens), summing to prompt;
        `api_key`: the credential the call came with (provider caches are per key)."""
        ...


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass(frozen=True)
class InjectedFailure:
    status: int
    retry_after: str | None = None
    message: str = "injected failure"


@dataclass
class FakeUpstreamApp:
    """The ASGI app; its attributes are the knobs tests turn (`delay_s`, `fail_next`)."""

    cache: PromptCacheModel | None = None
    reply_words: int = 9
    api_key: str | None = None  # when set, requests must carry it (Bearer or x-api-key)
    delay_s: float = 0.0  # before the response starts: drives client timeouts
    chunk_delay_s: float = 0.0  # between stream chunks
    hold: threading.Event | None = None  # when set: calls are served once it is set
    drop_stream_after: int | None = None  # end streams cleanly after N events, unfinished
    # as an engine with this many batch slots: more calls queue inside it (`delay_s` each)
    max_concurrent: int | None = None
    peak_concurrent: int = 0  # the most calls it served at once
    # as vLLM: /v1/models reports it, and prompt + max_tokens over it is a 400
    max_model_len: int | None = None
    # replies shaped as the providers send them today, every field (tests/fakes/today.py)
    today: bool = False
    counter: TokenCounter = field(default_factory=TokenCounter)
    requests: list[RecordedRequest] = field(default_factory=list)
    _failures: deque[InjectedFailure] = field(default_factory=deque)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: asyncio.Semaphore | None = None
    _serving: int = 0

    def fail_next(
        self,
        status: int = 500,
        count: int = 1,
        retry_after: str | None = None,
        message: str = "injected failure",
    ) -> None:
        with self._lock:
            self._failures.extend([InjectedFailure(status, retry_after, message)] * count)

    def _next_failure(self) -> InjectedFailure | None:
        with self._lock:
            return self._failures.popleft() if self._failures else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.requests.append(RecordedRequest(path, headers, body))
        wire = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(path)
        if path == "/v1/models":
            await respond(send, 200, self._models())
            return
        if path == "/health":  # as the bundled engine, vLLM and SGLang: free, no tokens
            await respond(send, 200, b"{}")
            return
        if path == "/v1/responses":  # tests/fakes/responses_api.py
            key = headers.get("authorization", "")[7:]
            await serve_responses(self, body, send, key)
            return
        if wire is None:
            await respond(send, 404, error_body("openai", "no such route", "not_found"))
            return
        if self.max_concurrent is None:
            await self._serve(wire, body, headers, send)
            return
        if self._slots is None:  # made on the server's own loop
            self._slots = asyncio.Semaphore(self.max_concurrent)
        async with self._slots:
            self._serving += 1
            self.peak_concurrent = max(self.peak_concurrent, self._serving)
            try:
                await self._serve(wire, body, headers, send)
            finally:
                self._serving -= 1

    async def _serve(self, wire: str, body: bytes, headers: dict[str, str], send: Send) -> None:
        if self.hold is not None:  # a test lets the calls in once they are all where it wants
            await asyncio.to_thread(self.hold.wait)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        failure = self._next_failure()
        if failure is not None:
            extra = [(b"retry-after", failure.retry_after.encode())] if failure.retry_after else []
            await respond(
                send,
                failure.status,
                error_body(wire, failure.message, error_type(failure.status)),
                extra,
            )
            return
        if self.api_key is not None and self.api_key not in (
            headers.get("x-api-key"),
            headers.get("authorization", "")[7:],
        ):
            await respond(send, 401, error_body(wire, "bad api key", "authentication_error"))
            return
        key = headers.get("x-api-key") or headers.get("authorization", "")[7:]
        await self._complete(wire, body, send, key)

    async def _complete(self, wire: str, raw: bytes, send: Send, api_key: str = "") -> None:
        try:
            body = orjson.loads(raw)
            codec = codec_for(wire)
            req = codec.decode_request(body)
        except (orjson.JSONDecodeError, WireFormatError) as exc:
            await respond(send, 400, error_body(wire, str(exc), "invalid_request_error"))
            return
        if self.today:
            await serve_today(wire, body, last_user_text(req), send)
            return
        refusal = self._refusal(wire, req)
        if refusal is not None:
            await respond(send, *refusal)
            return
        resp = self._reply(wire, body, req, api_key)
        prefill_s = self._prefill_s()
        if prefill_s:
            await asyncio.sleep(prefill_s)
        if req.stream:
            slow = SLOW in last_user_text(req)
            await self._stream(wire, body, resp, send, SLOW_CHUNK_S if slow else self.chunk_delay_s)
        elif wire == "openai":
            await respond(send, 200, orjson.dumps(openai_wire.encode_response(resp)))
        else:
            await respond(send, 200, orjson.dumps(anthropic_wire.encode_response(resp)))

    def _prefill_s(self) -> float:
        """The last call's prefill time, from a cache that models it (tests.fakes.prompt_cache
        with `prefill_s_per_token`); read right after `_reply` accounted the call."""
        prefill_s = getattr(self.cache, "prefill_s", None)
        calls = getattr(self.cache, "calls", None)
        if prefill_s is None or not calls:
            return 0.0
        last = calls[-1]
        return float(prefill_s(last.uncached + last.write, last.read))

    def _models(self) -> bytes:
        card: dict[str, Any] = {"id": "gpt-4o-mini", "object": "model", "owned_by": "fake"}
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return orjson.dumps({"object": "list", "data": [card]})

    def _refusal(self, wire: str, req: ChatRequest) -> tuple[int, bytes] | None:
        """The error this request earns: a `status:NNN` it asks for, or vLLM's 400 for a
        request over the context window."""
        asked = STATUS.search(last_user_text(req))
        if asked is not None:
            status = int(asked.group(1))
            return status, error_body(wire, "injected by the request", error_type(status))
        if self.max_model_len is None:
            return None
        prompt = self.counter.count_request(req)
        total = prompt + (req.max_tokens or 0)
        if total <= self.max_model_len:
            return None
        message = (
            f"This model's maximum context length is {self.max_model_len} tokens. However, you "
            f"requested {total} tokens ({prompt} in the messages, {req.max_tokens} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        return 400, error_body(wire, message, "BadRequestError")

    def _reply(
        self, wire: str, body: dict[str, Any], req: ChatRequest, api_key: str = ""
    ) -> ChatResponse:
        prompt = self.counter.count_request(req)
        uncached, read, write = (
            (prompt, 0, 0)
            if self.cache is None
            else self.cache.account(wire, body, prompt, api_key=api_key)
        )
        if uncached + read + write != prompt:
            raise AssertionError("PromptCacheModel.account must split prompt_tokens exactly")
        # the 1 h share of the writes, from a cache that tells (tests.fakes.prompt_cache)
        calls = getattr(self.cache, "calls", None)
        last = calls[-1] if calls else None
        write_1h = last.write_1h if write and hasattr(last, "write_1h") else 0
        n = next(self._ids)
        reply = plan_reply(req, self.counter, self.reply_words, n)
        prefix = "chatcmpl-fake-" if wire == "openai" else "msg_fake_"
        return ChatResponse(
            f"{prefix}{n:06d}",
            req.model,
            reply.content,
            reply.stop_reason,
            Usage(uncached, reply.output_tokens, read, write, write_1h),
            reply.stop_sequence,
        )

    async def _stream(
        self, wire: str, body: dict[str, Any], resp: ChatResponse, send: Send, delay_s: float
    ) -> None:
        encoder: OpenAIStreamEncoder | AnthropicStreamEncoder
        if wire == "openai":
            encoder = OpenAIStreamEncoder(include_usage=openai_wire.include_usage(body))
        else:
            encoder = AnthropicStreamEncoder(
                start_usage=Usage(
                    resp.usage.input_tokens,
                    0,
                    resp.usage.cache_read_tokens,
                    resp.usage.cache_write_tokens,
                    resp.usage.cache_write_1h_tokens,
                )
            )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        events = stream_events(resp, self.counter)
        if self.drop_stream_after is not None:  # the upstream dies mid-answer
            events = events[: self.drop_stream_after]
        for event in events:
            await send(
                {"type": "http.response.body", "body": encoder.encode(event), "more_body": True}
            )
            if delay_s:
                await asyncio.sleep(delay_s)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class FakeUpstream:
    """Runs a FakeUpstreamApp on 127.0.0.1 (random port by default) in a background thread."""

    def __init__(
        self,
        cache: PromptCacheModel | None = None,
        *,
        port: int = 0,
        reply_words: int = 9,
        api_key: str | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.app = FakeUpstreamApp(
            cache=cache, reply_words=reply_words, api_key=api_key, max_model_len=max_model_len
        )
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """Anthropic-style base (the SDK appends /v1/messages)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """OpenAI-style base (the SDK appends /chat/completions)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.app.requests

    def fail_next(self, status: int = 500, count: int = 1, retry_after: str | None = None) -> None:
        self.app.fail_next(status, count, retry_after)

    def start(self) -> FakeUpstream:
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("fake upstream did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Lantern's fake OpenAI/Anthropic upstream")
    parser.add_argument("--port", type=int, default=18000)
    parser.add_argument("--reply-words", type=int, default=9)
    parser.add_argument("--delay-s", type=float, default=0.0, help="before each response")
    parser.add_argument("--chunk-delay-s", type=float, default=0.0, help="between SSE chunks")
    args = parser.parse_args()
    app = FakeUpstreamApp(
        reply_words=args.reply_words, delay_s=args.delay_s, chunk_delay_s=args.chunk_delay_s
    )
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, lifespan="off", log_level="warning", access_log=False
    )


if __name__ == "__main__":
    main()
