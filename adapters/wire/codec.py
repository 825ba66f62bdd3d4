"""The chat wires behind one interface, and the lookup by name that replaces `if wire == ...`.

`ChatCodec` is what the gateway asks of a client's wire (OpenAI chat completions, Anthropic
messages); each wire's package implements it in its `codec.py`. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from adapters.types import JSON, ChatRequest, ChatResponse, StreamEvent, ToolSpec, WireFormat
from adapters.wire import anthropic, openai
from adapters.wire.openai import ToolListMemo


class ChatCodec(Protocol):
    """One chat wire: its requests, replies, tools and streams, and the route it is served on."""

    @property
    def wire(self) -> WireFormat: ...

    @property
    def door(self) -> str:
        """The client's route as the ledger and spans name it (`chat.completions`, `messages`)."""
        ...

    def decode_request(
        self, body: Mapping[str, Any], tool_lists: ToolListMemo | None = None
    ) -> ChatRequest: ...

    def encode_request(self, req: ChatRequest) -> dict[str, Any]: ...

    def decode_response(self, body: Mapping[str, Any]) -> ChatResponse: ...

    def encode_response(self, resp: ChatResponse) -> dict[str, Any]: ...

    def is_typed_tool(self, tool: JSON) -> bool: ...

    def decode_tools(self, value: JSON) -> tuple[ToolSpec, ...]: ...

    def stream_encoder(
        self, body: Mapping[str, Any], model: str, prompt_tokens: int
    ) -> Callable[[StreamEvent], bytes]:
        """Canonical events -> this wire's SSE bytes, for one reply to `body`."""
        ...

    def error_event(self, payload: bytes) -> bytes:
        """An error reported in-band once a stream has started, framed as the provider does."""
        ...


CODECS: Mapping[WireFormat, ChatCodec] = {"openai": openai.CODEC, "anthropic": anthropic.CODEC}


def codec_for(wire: WireFormat) -> ChatCodec:
    return CODECS[wire]


def reply_body(wire: WireFormat, resp: ChatResponse, model: str) -> Mapping[str, Any]:
    """The body a client of `wire` gets: the upstream's own when it spoke that wire (every
    field and block as sent; `model` the name the client asked for, the one edit), else the
    wire's encoding of the canonical reply."""
    relayed = resp.upstream
    if relayed is not None and relayed.wire == wire:
        body = relayed.body
        return body if body.get("model") == model else {**body, "model": model}
    return CODECS[wire].encode_response(replace(resp, model=model))
