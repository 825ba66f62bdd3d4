"""OpenAI's Responses API: requests (`request`, input and output items in `items`), the reply
object (`response`), its SSE events (`stream`), and a Responses upstream's replies relayed as they
came (`relay`). The one import for the format."""

from __future__ import annotations

from adapters.wire.responses.relay import ResponsesRelay, decode_reply, door_edits
from adapters.wire.responses.request import (
    ResponsesRequest,
    check_response_id,
    parse_request,
    to_chat_request,
)
from adapters.wire.responses.response import encode_response, envelope
from adapters.wire.responses.stream import ResponsesStreamEncoder

__all__ = [
    "ResponsesRelay",
    "ResponsesRequest",
    "ResponsesStreamEncoder",
    "check_response_id",
    "decode_reply",
    "door_edits",
    "encode_response",
    "envelope",
    "parse_request",
    "to_chat_request",
]
