"""OpenAI chat response JSON <-> canonical: usage rules (cache inside prompt_tokens), round
trips with tool calls, finish reasons, and the error body's shape."""

from __future__ import annotations

import pytest

from adapters.types import (
    ChatResponse,
    TextPart,
    ToolUsePart,
    Usage,
)
from adapters.wire import openai as openai_wire


def test_usage_mapping_counts_cache_inside_prompt_tokens() -> None:
    usage = Usage(input_tokens=100, output_tokens=20, cache_read_tokens=900, cache_write_tokens=50)
    wire = openai_wire.encode_usage(usage)
    assert wire == {
        "prompt_tokens": 1050,
        "completion_tokens": 20,
        "total_tokens": 1070,
        "prompt_tokens_details": {"cached_tokens": 900, "cache_write_tokens": 50},
    }
    assert openai_wire.decode_usage(wire) == usage
    assert openai_wire.decode_usage(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 640},
        }
    ) == Usage(input_tokens=360, output_tokens=7, cache_read_tokens=640)
    # LiteLLM's spelling of the same facts
    assert (
        openai_wire.decode_usage(
            {
                "prompt_tokens": 1050,
                "completion_tokens": 20,
                "cache_creation_input_tokens": 50,
                "cache_read_input_tokens": 900,
            }
        )
        == usage
    )


def test_response_round_trip_with_tool_calls() -> None:
    resp = ChatResponse(
        id="chatcmpl-1",
        model="gpt-4o-mini",
        content=(TextPart("Checking."), ToolUsePart("call_9", "get_weather", '{"city":"Oslo"}')),
        stop_reason="tool_use",
        usage=Usage(10, 5, 2, 0),
    )
    wire = openai_wire.encode_response(resp, created=1700000000)
    assert wire["choices"] == [
        {
            "index": 0,
            "logprobs": None,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Checking.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                    }
                ],
            },
        }
    ]
    assert wire["created"] == 1700000000 and wire["object"] == "chat.completion"
    assert openai_wire.decode_response(wire) == resp


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "error"),
    ],
)
def test_finish_reason_mapping(finish: str, stop: str) -> None:
    body = {
        "id": "x",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": finish}
        ],
    }
    assert openai_wire.decode_response(body).stop_reason == stop


def test_error_body_shape() -> None:
    import orjson

    assert orjson.loads(
        openai_wire.encode_error("bad", "invalid_request_error", param="messages[0]")
    ) == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "messages[0]",
            "code": None,
        }
    }
