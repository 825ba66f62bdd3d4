"""Backend for Anthropic's Messages API over httpx (`x-api-key`, `anthropic-version`).

Forwards the client's own JSON when it spoke Anthropic (edits: model, stream flag), else
encodes the canonical request; to an Anthropic client the reply goes as the upstream sent it
(`relay`, `complete`'s `upstream`), the model name as asked its one edit. Holds no tenant or routing logic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import orjson

from adapters.backend import BackendCall, RelayedChunk
from adapters.backends.spec import BackendSpec, allowed_betas, forwarded_betas
from adapters.errors import ProviderUnavailable, WireFormatError, malformed_reply
from adapters.http.upstream import HTTPClient
from adapters.types import ChatResponse, StreamEvent, WireFormat, WireReply
from adapters.wire import anthropic as anthropic_wire
from adapters.wire.anthropic import AnthropicStreamDecoder
from adapters.wire.anthropic.relay import AnthropicRelay

DEFAULT_VERSION = "2023-06-01"
# the Messages fields `/v1/messages/count_tokens` takes (it refuses any other)
COUNT_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"}
)


def build_body(call: BackendCall, *, model: str | None, stream: bool) -> dict[str, Any]:
    """The client's raw Anthropic body (shallow copy) or the canonical encoding, with `model`
    replaced when the backend names one and `stream` set or removed."""
    if call.raw_body is not None and call.client_wire == "anthropic":
        body = dict(call.raw_body)
    else:
        body = anthropic_wire.encode_request(call.request)
    if model is not None:
        body["model"] = model
    if stream:
        body["stream"] = True
    else:
        body.pop("stream", None)
    return body


def messages_url(base_url: str) -> str:
    """`https://api.anthropic.com` and `.../v1` both lead to `.../v1/messages`."""
    base = base_url.rstrip("/")
    return base + ("/messages" if base.endswith("/v1") else "/v1/messages")


class AnthropicBackend:
    wire: WireFormat | None = "anthropic"

    def __init__(self, spec: BackendSpec, *, http: HTTPClient) -> None:
        self.name: str = spec.name
        self.kind: str = spec.kind
        self._model = spec.model
        self._timeout_s = spec.timeout_s
        headers = {
            "content-type": "application/json",
            "anthropic-version": str(spec.extra.get("anthropic_version", DEFAULT_VERSION)),
        }
        if spec.api_key:
            headers["x-api-key"] = spec.api_key
        self._betas = allowed_betas(spec)
        url = messages_url(spec.base_url or "https://api.anthropic.com")
        self._upstream = http.upstream(spec.name, url, headers)
        self._counter = http.upstream(spec.name, url + "/count_tokens", headers)

    def _prepare(self, call: BackendCall, stream: bool) -> tuple[bytes, float]:
        body = build_body(call, model=self._model, stream=stream)
        return orjson.dumps(body), min(call.timeout_s, self._timeout_s)

    def _headers(self, call: BackendCall) -> dict[str, str] | None:
        """The call's extra headers plus the client's allowed betas."""
        headers = dict(call.extra_headers or {})
        betas = forwarded_betas(call.betas, self._betas)
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        return headers or None

    async def complete(self, call: BackendCall) -> ChatResponse:
        body, timeout_s = self._prepare(call, stream=False)
        reply = await self._upstream.post_json(
            body, timeout_s=timeout_s, headers=self._headers(call)
        )
        try:  # usage and blocks, for counting; the reply itself relayed to an Anthropic client
            decoded = anthropic_wire.decode_response(reply)
        except WireFormatError as exc:
            raise malformed_reply(self.name, exc) from exc
        return dataclasses.replace(decoded, upstream=WireReply("anthropic", reply))

    async def stream(self, call: BackendCall) -> AsyncIterator[StreamEvent]:
        body, timeout_s = self._prepare(call, stream=True)
        decoder = AnthropicStreamDecoder(self.name)
        async for event in self._upstream.post_sse(
            body, timeout_s=timeout_s, headers=self._headers(call)
        ):
            if decoder.ended:
                continue
            try:
                events = decoder.feed(event.data)
            except WireFormatError as exc:
                raise malformed_reply(self.name, exc) from exc
            for out in events:
                yield out
        if not decoder.ended:
            raise ProviderUnavailable(self.name, "stream ended before message_stop")

    async def relay(self, call: BackendCall) -> AsyncIterator[RelayedChunk]:
        """The upstream's stream for an Anthropic client (`call.raw_body` is its JSON): every
        event forwarded as framed, in order, known or not (`AnthropicRelay`), with its
        canonical events; the events of one upstream read go out as one chunk."""
        if call.client_wire != "anthropic" or call.raw_body is None:
            raise ValueError("relay() serves an Anthropic client's own body; use stream()")
        body, timeout_s = self._prepare(call, stream=True)
        relay = AnthropicRelay(self.name, model=call.request.model)
        reads = self._upstream.post_sse_reads(
            body, timeout_s=timeout_s, headers=self._headers(call)
        )
        async for read in reads:  # what arrived together leaves together: one client write
            chunk, error = relay.feed_all(read)
            if chunk is not None:
                yield chunk
            if isinstance(error, WireFormatError):
                raise malformed_reply(self.name, error) from error
            if error is not None:
                raise error
        if not relay.ended:
            raise ProviderUnavailable(self.name, "stream ended before message_stop")

    async def count_tokens(self, call: BackendCall) -> int:
        """The provider's own count of the prompt (`/v1/messages/count_tokens`), exact."""
        full = build_body(call, model=self._model, stream=False)
        body = {k: v for k, v in full.items() if k in COUNT_FIELDS}
        reply = await self._counter.post_json(
            orjson.dumps(body),
            timeout_s=min(call.timeout_s, self._timeout_s),
            headers=self._headers(call),
        )
        count = reply.get("input_tokens") if isinstance(reply, dict) else None
        if not isinstance(count, int):
            raise ProviderUnavailable(self.name, "count_tokens reply has no input_tokens")
        return count

    async def aclose(self) -> None:
        """The connection pool belongs to whoever built it (the gateway's lifespan)."""
