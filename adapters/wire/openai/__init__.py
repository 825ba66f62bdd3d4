"""OpenAI chat completions: requests (`request`, tools in `tools`), replies (`response`), SSE
chunks (`stream`), an OpenAI upstream's stream relayed to an OpenAI client (`relay`), and the
`/embeddings` answer (`embeddings`). The one import for the format."""

from __future__ import annotations

from adapters.wire.openai.codec import CODEC, OpenAICodec
from adapters.wire.openai.embeddings import embeddings_reply
from adapters.wire.openai.relay import OpenAIRelay
from adapters.wire.openai.request import (
    decode_message,
    decode_request,
    encode_request,
    include_usage,
)
from adapters.wire.openai.response import (
    decode_response,
    decode_usage,
    encode_error,
    encode_response,
    encode_usage,
)
from adapters.wire.openai.stream import OpenAIStreamDecoder, OpenAIStreamEncoder
from adapters.wire.openai.tools import ToolListMemo, decode_tools, is_typed_tool

__all__ = [
    "CODEC",
    "OpenAICodec",
    "OpenAIRelay",
    "OpenAIStreamDecoder",
    "OpenAIStreamEncoder",
    "ToolListMemo",
    "decode_message",
    "decode_request",
    "decode_response",
    "decode_tools",
    "decode_usage",
    "embeddings_reply",
    "encode_error",
    "encode_request",
    "encode_response",
    "encode_usage",
    "include_usage",
    "is_typed_tool",
]
