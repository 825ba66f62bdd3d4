"""Anthropic messages: requests (`request`, content blocks in `blocks`), replies and error bodies
(`response`) and SSE events (`stream`). The one import for the format."""

from __future__ import annotations

from adapters.wire.anthropic.codec import CODEC, AnthropicCodec
from adapters.wire.anthropic.request import (
    decode_message,
    decode_request,
    decode_system,
    decode_tools,
    encode_request,
    is_typed_tool,
    output_schema_of,
)
from adapters.wire.anthropic.response import (
    decode_response,
    decode_usage,
    encode_error,
    encode_response,
    encode_usage,
)
from adapters.wire.anthropic.stream import AnthropicStreamDecoder, AnthropicStreamEncoder

__all__ = [
    "CODEC",
    "AnthropicCodec",
    "AnthropicStreamDecoder",
    "AnthropicStreamEncoder",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_system",
    "decode_tools",
    "decode_usage",
    "encode_error",
    "encode_request",
    "encode_response",
    "encode_usage",
    "is_typed_tool",
    "output_schema_of",
]
