"""Backend for OpenAI-compatible chat endpoints (the bundled engine, vLLM, SGLang, OpenAI).

Forwards the client's own JSON when it spoke OpenAI (edits: model, streaming usage, cache
salt), else encodes the canonical request; streams to an OpenAI client are relayed as the
upstream framed them (`relay`, adapters/wire/openai/relay.py). Holds no tenant or routing logic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from adapters.backend import BackendCall, EmbeddingReply, HealthCheck, RelayedChunk
from adapters.backends.openai_responses import ResponsesUpstream
from adapters.backends.spec import SALTED_ENGINES, TOP_K_ENGINES, BackendSpec
from adapters.errors import ProviderUnavailable, WireFormatError, malformed_reply
from adapters.http.upstream import HTTPClient
from adapters.types import ChatResponse, StreamEvent, WireFormat, WireReply
from adapters.wire import openai as openai_wire
from adapters.wire.openai import OpenAIRelay, OpenAIStreamDecoder

SESSION_HEADER = "x-session-id"


# the bundled engine's request field: the prompt's declared-public head (gateway-set only)
PUBLIC_FIELD = "lantern_public"


def build_body(
    call: BackendCall, *, model: str | None, stream: bool, send_cache_salt: bool, engine: str
) -> dict[str, Any]:
    """The OpenAI JSON to send: the client's raw body (shallow copy) or the canonical encoding.

    Deterministic edits only: `model` when the backend names one; `stream` set or removed;
    `stream_options.include_usage` forced on when streaming (usage settles quotas; the client's
    own choice is honoured by the gateway's stream encoder); `cache_salt` when the request has
    one and the backend accepts it (a client's own is never forwarded); an Anthropic client's
    `top_k` for the engines that take it; `lantern_public` (the declared-public head, which the
    bundled engine shares across tenants) set by the gateway alone, for `engine: lantern`.
    """
    if call.raw_body is not None and call.client_wire == "openai":
        body = dict(call.raw_body)
    else:
        body = openai_wire.encode_request(call.request)
        top_k = call.request.extra.get("top_k")  # an Anthropic client's
        if top_k is not None and engine in TOP_K_ENGINES:
            body["top_k"] = top_k
    if model is not None:
        body["model"] = model
    if stream:
        body["stream"] = True
        options = body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_usage") is True):
            body["stream_options"] = {**(options or {}), "include_usage": True}
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    body.pop("cache_salt", None)  # never the client's own: the tenant's, or none
    body.pop(PUBLIC_FIELD, None)
    if send_cache_salt and call.request.cache_salt is not None:
        body["cache_salt"] = call.request.cache_salt
    public = call.request.cache_public
    if engine == "lantern" and "cache_salt" in body and public and (public.tools or public.system):
        body[PUBLIC_FIELD] = {"tools": public.tools, "system": public.system}
    return body


# servers with a free `/health` at their root: the bundled engine, vLLM, SGLang
HEALTH_ENGINES = ("lantern", "vllm", "sglang")


class OpenAICompatibleBackend:
    wire: WireFormat | None = "openai"

    def __init__(self, spec: BackendSpec, *, http: HTTPClient) -> None:
        if not spec.base_url:
            raise ValueError(f"backend {spec.name}: base_url is required")
        self.name: str = spec.name
        self.kind: str = spec.kind
        self._model = spec.model
        self._timeout_s = spec.timeout_s
        # what serves the URL; the bundled engine when the kind is `selfhost`
        self._engine = str(
            spec.extra.get("engine", "lantern" if spec.kind == "selfhost" else "other")
        )
        self.takes_top_k = self._engine in TOP_K_ENGINES
        self._send_cache_salt = bool(
            spec.extra.get("send_cache_salt", self._engine in SALTED_ENGINES)
        )
        headers = {"content-type": "application/json"}
        if spec.api_key:
            headers["authorization"] = f"Bearer {spec.api_key}"
        url = spec.base_url.rstrip("/") + "/chat/completions"
        self._upstream = http.upstream(spec.name, url, headers)
        # `responses: native`: the Responses door is forwarded to the upstream's /responses
        self._responses = (
            ResponsesUpstream(spec.name, http, spec.base_url, headers)
            if spec.extra.get("responses") == "native"
            else None
        )
        # an engine's /health at its server root, else the OpenAI API's free /models
        base = spec.base_url.rstrip("/")
        auth = {k: v for k, v in headers.items() if k == "authorization"}
        models = base + "/models"
        engine_health = base.removesuffix("/v1") + "/health"
        urls = (engine_health, models) if self._engine in HEALTH_ENGINES else (models,)
        self.health_check = HealthCheck(urls, auth)
        self.embeds = spec.kind == "openai_compatible"  # the bundled engine has no /embeddings
        embeddings_url = spec.base_url.rstrip("/") + "/embeddings"
        self._embeddings = http.upstream(spec.name, embeddings_url, headers)

    async def embed(
        self, body: Mapping[str, Any], timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> EmbeddingReply:
        """The upstream's `/embeddings` for the client's body, `model` set to the backend's."""
        sent = {**body, "model": self._model} if self._model else dict(body)
        reply = await self._embeddings.post_json(
            orjson.dumps(sent), timeout_s=min(timeout_s, self._timeout_s), headers=headers
        )
        usage = reply.get("usage") if isinstance(reply, dict) else None
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int) or not isinstance(reply.get("data"), list):
            raise ProviderUnavailable(self.name, "embeddings reply without data or usage")
        return EmbeddingReply(reply, tokens)

    def _prepare(self, call: BackendCall, stream: bool) -> tuple[bytes, dict[str, str], float]:
        body = build_body(
            call,
            model=self._model,
            stream=stream,
            send_cache_salt=self._send_cache_salt,
            engine=self._engine,
        )
        headers = dict(call.extra_headers or {})
        if call.request.session_id is not None:
            headers[SESSION_HEADER] = call.request.session_id
        return orjson.dumps(body), headers, min(call.timeout_s, self._timeout_s)

    def _native(self, call: BackendCall) -> ResponsesUpstream | None:
        return self._responses if call.native_body is not None else None

    def _native_headers(self, call: BackendCall) -> tuple[dict[str, str], float]:
        headers = dict(call.extra_headers or {})
        if call.request.session_id is not None:
            headers[SESSION_HEADER] = call.request.session_id
        return headers, min(call.timeout_s, self._timeout_s)

    async def complete(self, call: BackendCall) -> ChatResponse:
        native = self._native(call)
        if native is not None:
            return await native.complete(call, self._model, *self._native_headers(call))
        body, headers, timeout_s = self._prepare(call, stream=False)
        reply = await self._upstream.post_json(body, timeout_s=timeout_s, headers=headers)
        try:  # usage and parts, for counting; the reply itself relayed to an OpenAI client
            return openai_wire.decode_response(reply, WireReply("openai", reply))
        except WireFormatError as exc:
            raise malformed_reply(self.name, exc) from exc

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        native = self._native(call)
        if native is not None:  # the relay's events, its bytes left aside
            async for piece in native.relay(call, self._model, *self._native_headers(call)):
                for item in piece.events:
                    yield item
            return
        body, headers, timeout_s = self._prepare(call, stream=True)
        decoder = OpenAIStreamDecoder(self.name)
        async for event in self._upstream.post_sse(body, timeout_s=timeout_s, headers=headers):
            if decoder.ended:
                continue
            try:
                events = decoder.feed(event.data)
            except WireFormatError as exc:
                raise malformed_reply(self.name, exc) from exc
            for out in events:
                yield out
        if not decoder.ended:
            if not decoder.saw_finish_reason:
                raise ProviderUnavailable(self.name, "stream ended before a finish_reason")
            for out in decoder.finish():
                yield out

    async def relay(self, call: BackendCall) -> AsyncIterator[RelayedChunk]:
        """The upstream's stream for an OpenAI client (`call.raw_body` is its JSON): each chunk
        forwarded as framed, edited only as `OpenAIRelay` says, with its canonical events; the
        chunks of one upstream read go out as one."""
        if call.client_wire != "openai" or call.raw_body is None:
            raise ValueError("relay() serves an OpenAI client's own body; use stream()")
        native = self._native(call)
        if native is not None:
            async for piece in native.relay(call, self._model, *self._native_headers(call)):
                yield piece
            return
        body, headers, timeout_s = self._prepare(call, stream=True)
        relay = OpenAIRelay(
            self.name,
            model=call.request.model,
            include_usage=openai_wire.include_usage(call.raw_body),
        )
        reads = self._upstream.post_sse_reads(body, timeout_s=timeout_s, headers=headers)
        async for read in reads:  # what arrived together leaves together: one client write
            chunk, error = relay.feed_all(read)
            if chunk is not None:
                yield chunk
            if isinstance(error, WireFormatError):
                raise malformed_reply(self.name, error) from error
            if error is not None:
                raise error
        if not relay.ended:
            if not relay.decoder.saw_finish_reason:
                raise ProviderUnavailable(self.name, "stream ended before a finish_reason")
            data, events = relay.finish()
            yield RelayedChunk(data, tuple(events))

    async def aclose(self) -> None:
        """The connection pool belongs to whoever built it (the gateway's lifespan)."""
