"""OpenAI chat completions as a `ChatCodec` (adapters/wire/codec.py): the package's functions
behind the interface the gateway uses for every chat wire."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adapters.types import JSON, ChatRequest, ChatResponse, StreamEvent, ToolSpec
from adapters.wire.openai import request, response, tools
from adapters.wire.openai.stream import OpenAIStreamEncoder


@dataclass(frozen=True)
class OpenAICodec:
    wire: Literal["openai"] = "openai"
    door: str = "chat.completions"

    def decode_request(
        self, body: Mapping[str, Any], tool_lists: tools.ToolListMemo | None = None
    ) -> ChatRequest:
        return request.decode_request(body, tool_lists)

    def encode_request(self, req: ChatRequest) -> dict[str, Any]:
        return request.encode_request(req)

    def decode_response(self, body: Mapping[str, Any]) -> ChatResponse:
        return response.decode_response(body)

    def encode_response(self, resp: ChatResponse) -> dict[str, Any]:
        return response.encode_response(resp)

    def is_typed_tool(self, tool: JSON) -> bool:
        return tools.is_typed_tool(tool)

    def decode_tools(self, value: JSON) -> tuple[ToolSpec, ...]:
        return tools.decode_tools(value)

    def stream_encoder(
        self, body: Mapping[str, Any], model: str, prompt_tokens: int
    ) -> Callable[[StreamEvent], bytes]:
        return OpenAIStreamEncoder(include_usage=request.include_usage(body), model=model).encode

    def error_event(self, payload: bytes) -> bytes:
        return b"data: " + payload + b"\n\n"


CODEC = OpenAICodec()
