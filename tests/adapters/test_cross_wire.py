"""OpenAI client -> Anthropic backend and back, through the canonical model, with tool calls."""

from __future__ import annotations

from adapters.types import ChatResponse, TextPart, ToolUsePart, Usage
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the docs",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]

OPENAI_BODY = {
    "model": "claude-sonnet-4-5",
    "messages": [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "Find cache docs and pricing"},
        {
            "role": "assistant",
            "content": "Searching twice.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q":"cache"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q":"pricing"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "cache doc"},
        {"role": "tool", "tool_call_id": "call_b", "content": "pricing doc"},
        {"role": "user", "content": "Summarise"},
    ],
    "tools": TOOLS,
    "tool_choice": "required",
    "max_completion_tokens": 300,
    "stop": ["###"],
    "user": "u1",
}

ANTHROPIC_GOLDEN = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 300,
    "system": [{"type": "text", "text": "Be exact."}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Find cache docs and pricing"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching twice."},
                {"type": "tool_use", "id": "call_a", "name": "search", "input": {"q": "cache"}},
                {"type": "tool_use", "id": "call_b", "name": "search", "input": {"q": "pricing"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_a",
                    "content": [{"type": "text", "text": "cache doc"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": [{"type": "text", "text": "pricing doc"}],
                },
                {"type": "text", "text": "Summarise"},
            ],
        },
    ],
    "tools": [
        {
            "name": "search",
            "description": "Search the docs",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ],
    "tool_choice": {"type": "any"},
    "stop_sequences": ["###"],
    "metadata": {"user_id": "u1"},
}


def test_openai_request_becomes_the_anthropic_golden() -> None:
    canonical = openai_wire.decode_request(OPENAI_BODY)
    assert anthropic_wire.encode_request(canonical) == ANTHROPIC_GOLDEN


def test_anthropic_golden_comes_back_as_the_openai_request() -> None:
    canonical = anthropic_wire.decode_request(ANTHROPIC_GOLDEN)
    back = openai_wire.encode_request(canonical)
    expected = {k: v for k, v in OPENAI_BODY.items() if k != "max_completion_tokens"}
    expected["max_tokens"] = 300
    assert back == expected


def test_anthropic_tool_use_response_reaches_an_openai_client() -> None:
    upstream = {
        "id": "msg_7",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "One moment."},
            {"type": "tool_use", "id": "toolu_x", "name": "search", "input": {"q": "ttl"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 20,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 4000,
            "output_tokens": 15,
        },
    }
    canonical = anthropic_wire.decode_response(upstream)
    assert canonical == ChatResponse(
        "msg_7",
        "claude-sonnet-4-5",
        (TextPart("One moment."), ToolUsePart("toolu_x", "search", '{"q":"ttl"}')),
        "tool_use",
        Usage(20, 15, 4000, 1000),
    )
    client = openai_wire.encode_response(canonical, created=1)
    assert client["choices"][0]["finish_reason"] == "tool_calls"
    assert client["choices"][0]["message"]["tool_calls"] == [
        {
            "id": "toolu_x",
            "type": "function",
            "function": {"name": "search", "arguments": '{"q":"ttl"}'},
        }
    ]
    assert client["usage"] == {
        "prompt_tokens": 5020,
        "completion_tokens": 15,
        "total_tokens": 5035,
        "prompt_tokens_details": {"cached_tokens": 4000, "cache_write_tokens": 1000},
    }


def test_openai_tool_call_response_reaches_an_anthropic_client() -> None:
    upstream = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_q",
                            "type": "function",
                            "function": {"name": "search", "arguments": '{"q": "x"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 9,
            "total_tokens": 109,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    }
    client = anthropic_wire.encode_response(openai_wire.decode_response(upstream))
    assert client["content"] == [
        {"type": "tool_use", "id": "call_q", "name": "search", "input": {"q": "x"}}
    ]
    assert client["stop_reason"] == "tool_use"
    assert client["usage"] == {
        "input_tokens": 36,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 64,
        "output_tokens": 9,
    }
