"""What the codecs must not drop: thinking blocks (Anthropic and Bedrock, stream and not),
OpenAI's further choices, logprobs and system_fingerprint, and the `msg_` ids of the
Anthropic door."""

from __future__ import annotations

import base64

import orjson

from adapters.backends.bedrock.converse_reply import ConverseStreamDecoder, decode_converse
from adapters.backends.bedrock.converse_request import encode_converse
from adapters.sse import SSEParser
from adapters.types import (
    ChatRequest,
    ChatResponse,
    Message,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ThinkingPart,
    ThinkingStart,
    ToolUsePart,
    Usage,
)
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.anthropic import AnthropicStreamDecoder, AnthropicStreamEncoder

THOUGHT = ThinkingPart("Let me see.", "c2lnbmF0dXJl")
HIDDEN = ThinkingPart(redacted_data=base64.b64encode(b"opaque").decode())


def test_anthropic_reply_keeps_thinking_and_gets_a_msg_id() -> None:
    reply = {
        "id": "chatcmpl-abc",
        "model": "m",
        "content": [
            {"type": "thinking", "thinking": "Let me see.", "signature": "c2lnbmF0dXJl"},
            {"type": "redacted_thinking", "data": HIDDEN.redacted_data},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    decoded = anthropic_wire.decode_response(reply)
    assert decoded.content == (THOUGHT, HIDDEN, ToolUsePart("t1", "f", '{"a":1}'))
    encoded = anthropic_wire.encode_response(decoded)
    assert encoded["id"] == "msg_abc"
    assert encoded["content"] == reply["content"]


def test_anthropic_stream_carries_thinking_and_signature_deltas() -> None:
    events = [
        StreamStart("msg_1", "m", Usage(5, 1, 4000, 20)),
        ThinkingStart(0),
        ThinkingDelta(0, thinking="Let me "),
        ThinkingDelta(0, thinking="see."),
        ThinkingDelta(0, signature="c2lnbmF0dXJl"),
        ThinkingStart(1, redacted_data="b3BhcXVl"),
        TextDelta(2, "Hi"),
        StreamEnd("stop", Usage(5, 9, 4000, 20)),
    ]
    encoder = AnthropicStreamEncoder(model="m", start_usage=Usage(1))
    raw = b"".join(encoder.encode(e) for e in events)
    parser = SSEParser()
    frames = [orjson.loads(f.data) for f in parser.feed(raw)]
    assert frames[0]["message"]["usage"]["cache_read_input_tokens"] == 4000  # as reported
    deltas = [f["delta"] for f in frames if f["type"] == "content_block_delta"]
    assert deltas[:3] == [
        {"type": "thinking_delta", "thinking": "Let me "},
        {"type": "thinking_delta", "thinking": "see."},
        {"type": "signature_delta", "signature": "c2lnbmF0dXJl"},
    ]
    starts = [f["content_block"] for f in frames if f["type"] == "content_block_start"]
    assert starts[1] == {"type": "redacted_thinking", "data": "b3BhcXVl"}
    decoder = AnthropicStreamDecoder()
    parser = SSEParser()
    assert [e for f in parser.feed(raw) for e in decoder.feed(f.data)] == events


def test_bedrock_request_carries_reasoning_thinking_setting_and_betas() -> None:
    request = ChatRequest(
        model="m",
        messages=(
            Message("user", (TextPart("hi"),)),
            Message("assistant", (THOUGHT, HIDDEN, ToolUsePart("t1", "f", "{}"))),
        ),
        max_tokens=100,
        extra={"thinking": {"type": "enabled", "budget_tokens": 1024}},
    )
    kwargs = encode_converse("b", "model-id", request, False, ("interleaved-thinking-2025-05-14",))
    assert kwargs["messages"][1]["content"][:2] == [
        {
            "reasoningContent": {
                "reasoningText": {"text": "Let me see.", "signature": "c2lnbmF0dXJl"}
            }
        },
        {"reasoningContent": {"redactedContent": b"opaque"}},
    ]
    assert kwargs["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
    }


def test_bedrock_reply_and_stream_keep_reasoning() -> None:
    reply = {
        "output": {
            "message": {
                "content": [
                    {
                        "reasoningContent": {
                            "reasoningText": {"text": "Let me see.", "signature": "c2lnbmF0dXJl"}
                        }
                    },
                    {"reasoningContent": {"redactedContent": b"opaque"}},
                    {"text": "Hi"},
                ]
            }
        },
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 2},
    }
    assert decode_converse("m", reply).content == (THOUGHT, HIDDEN, TextPart("Hi"))
    decoder = ConverseStreamDecoder("m")

    def delta(index: int, reasoning: dict[str, object]) -> dict[str, object]:
        return {
            "contentBlockDelta": {
                "contentBlockIndex": index,
                "delta": {"reasoningContent": reasoning},
            }
        }

    events = [
        e
        for ev in (
            delta(0, {"text": "Let me see."}),
            delta(0, {"signature": "c2lnbmF0dXJl"}),
            delta(1, {"redactedContent": b"opaque"}),
        )
        for e in decoder.feed("r", ev)
    ]
    assert events == [
        ThinkingStart(0),
        ThinkingDelta(0, "Let me see.", ""),
        ThinkingDelta(0, "", "c2lnbmF0dXJl"),
        ThinkingStart(1, HIDDEN.redacted_data),
    ]


def test_openai_reply_keeps_every_choice_logprobs_and_fingerprint() -> None:
    logprobs = {"content": [{"token": "A", "logprob": -0.1, "bytes": [65], "top_logprobs": []}]}
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": "m",
        "system_fingerprint": "fp_123",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A"},
                "logprobs": logprobs,
                "finish_reason": "stop",
            },
            {
                "index": 1,
                "message": {"role": "assistant", "content": "B"},
                "logprobs": None,
                "finish_reason": "length",
            },
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    decoded = openai_wire.decode_response(reply)
    assert len(decoded.more_choices) == 1
    encoded = openai_wire.encode_response(decoded, created=7)
    assert encoded["system_fingerprint"] == "fp_123"
    assert [c["message"]["content"] for c in encoded["choices"]] == ["A", "B"]
    assert [c["finish_reason"] for c in encoded["choices"]] == ["stop", "length"]
    assert encoded["choices"][0]["logprobs"] == logprobs
    assert encoded["usage"]["completion_tokens"] == 2  # billed as upstream reported


def test_openai_reply_to_an_anthropic_client_drops_nothing_it_can_carry() -> None:
    response = ChatResponse("chatcmpl-9", "m", (THOUGHT, TextPart("x")), "stop", Usage(1, 1))
    assert anthropic_wire.encode_response(response)["content"][0]["signature"] == "c2lnbmF0dXJl"
