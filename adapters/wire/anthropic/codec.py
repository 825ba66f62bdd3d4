"""Anthropic messages as a `ChatCodec` (adapters/wire/codec.py): the package's functions behind
the interface the gateway uses for every chat wire."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adapters.types import JSON, ChatRequest, ChatResponse, StreamEvent, ToolSpec, Usage
from adapters.wire.anthropic import request, response
from adapters.wire.anthropic.stream import AnthropicStreamEncoder
from adapters.wire.openai import ToolListMemo


@dataclass(frozen=True)
class AnthropicCodec:
    wire: Literal["anthropic"] = "anthropic"
    door: str = "messages"

    def decode_request(
        self, body: Mapping[str, Any], tool_lists: ToolListMemo | None = None
    ) -> ChatRequest:
        return request.decode_request(body, tool_lists=tool_lists)

    def encode_request(self, req: ChatRequest) -> dict[str, Any]:
        return request.encode_request(req)

    def decode_response(self, body: Mapping[str, Any]) -> ChatResponse:
        return response.decode_response(body)

    def encode_response(self, resp: ChatResponse) -> dict[str, Any]:
        return response.encode_response(resp)

    def is_typed_tool(self, tool: JSON) -> bool:
        return request.is_typed_tool(tool)

    def decode_tools(self, value: JSON) -> tuple[ToolSpec, ...]:
        return request.decode_tools(value)

    def stream_encoder(
        self, body: Mapping[str, Any], model: str, prompt_tokens: int
    ) -> Callable[[StreamEvent], bytes]:
        start = Usage(input_tokens=prompt_tokens)
        return AnthropicStreamEncoder(model=model, start_usage=start).encode

    def error_event(self, payload: bytes) -> bytes:
        return b"event: error\ndata: " + payload + b"\n\n"


CODEC = AnthropicCodec()
