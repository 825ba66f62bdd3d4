"""Anthropic Messages JSON <-> canonical: goldens, round trips, usage rules and errors."""

from __future__ import annotations

import orjson
import pytest

from adapters.errors import WireFormatError
from adapters.types import (
    CacheControl,
    ChatRequest,
    ChatResponse,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
    Usage,
)
from adapters.wire import anthropic as anthropic_wire

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

AGENT_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Read main.py", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"path": "main.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "print('hi')"}],
                    "is_error": True,
                }
            ],
        },
    ],
    "system": [
        {
            "type": "text",
            "text": "You are a coder.",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ],
    "tools": [
        {
            "name": "read_file",
            "description": "Read a file",
            "input_schema": SCHEMA,
            "cache_control": {"type": "ephemeral"},
        }
    ],
    "tool_choice": {"type": "any"},
    "temperature": 0.5,
    "stop_sequences": ["END"],
    "metadata": {"user_id": "user-9"},
    "top_k": 5,
}


def test_decode_agent_body_golden() -> None:
    req = anthropic_wire.decode_request(AGENT_BODY)
    assert req == ChatRequest(
        model="claude-sonnet-4-5",
        system=(TextPart("You are a coder.", CacheControl("1h")),),
        messages=(
            Message(
                "user",
                (
                    TextPart("Read main.py", CacheControl()),
                    ImagePart(url="https://example.com/a.png"),
                ),
            ),
            Message(
                "assistant",
                (TextPart("Reading."), ToolUsePart("toolu_1", "read_file", '{"path":"main.py"}')),
            ),
            Message(
                "user", (ToolResultPart("toolu_1", (TextPart("print('hi')"),), is_error=True),)
            ),
        ),
        tools=(ToolSpec("read_file", "Read a file", SCHEMA, CacheControl()),),
        tool_choice="required",
        max_tokens=1024,
        temperature=0.5,
        stop=("END",),
        user="user-9",
        extra={"top_k": 5},
    )


def test_round_trip_preserves_the_body() -> None:
    assert anthropic_wire.encode_request(anthropic_wire.decode_request(AGENT_BODY)) == AGENT_BODY


def test_string_system_and_content() -> None:
    req = anthropic_wire.decode_request(
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 5,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": True,
        }
    )
    assert req.system == (TextPart("Be brief."),)
    assert req.messages == (Message("user", (TextPart("hello"),)),)
    assert req.stream is True


def test_thinking_blocks_are_kept_and_server_tools_skipped() -> None:
    req = anthropic_wire.decode_request(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                        {"type": "text", "text": "ok"},
                    ],
                }
            ],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        }
    )
    thinking = ThinkingPart("hmm", "sig")
    assert req.messages == (Message("assistant", (thinking, TextPart("ok"))),)
    assert req.tools == ()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_tokens": 1, "messages": []}, "model"),
        ({"model": "m", "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_use", "id": "a", "name": "n", "input": "notadict"}
                        ],
                    }
                ],
            },
            "messages[0].content[0].input",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}
                ],
            },
            "messages[0].content[0].tool_use_id",
        ),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": "x",
                                "cache_control": {"type": "ephemeral", "ttl": "9h"},
                            }
                        ],
                    }
                ],
            },
            "messages[0].content[0].cache_control.ttl",
        ),
        ({"model": "m", "messages": [], "metadata": {"user_id": 7}}, "metadata.user_id"),
        ({"model": "m", "messages": [], "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"model": "m", "messages": [], "stop_sequences": ["a", 2]}, "stop_sequences[1]"),
        ({"model": "m", "messages": [], "top_k": -1}, "top_k"),
        ({"model": "m", "messages": [], "top_k": True}, "top_k"),
        ({"model": "m", "messages": [], "top_k": "5"}, "top_k"),
    ],
)
def test_errors_name_the_json_path(body: dict, field: str) -> None:
    with pytest.raises(WireFormatError) as info:
        anthropic_wire.decode_request(body)
    assert info.value.field == field


def test_usage_mapping_keeps_kinds_apart() -> None:
    usage = Usage(input_tokens=12, output_tokens=30, cache_read_tokens=5000, cache_write_tokens=800)
    wire = anthropic_wire.encode_usage(usage)
    assert wire == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 800,
        "cache_read_input_tokens": 5000,
        "output_tokens": 30,
    }
    assert anthropic_wire.decode_usage(wire) == usage


def test_usage_carries_the_web_searches_the_provider_bills() -> None:
    """`server_tool_use.web_search_requests` is billed per search: decoded, and encoded back
    for an Anthropic client of a translated reply; web fetches are billed as tokens only."""
    wire = {
        "input_tokens": 12,
        "output_tokens": 41,
        "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 2},
    }
    usage = anthropic_wire.decode_usage(wire)
    assert usage == Usage(input_tokens=12, output_tokens=41, web_search_requests=3)
    assert anthropic_wire.encode_usage(usage)["server_tool_use"] == {"web_search_requests": 3}
    assert anthropic_wire.decode_usage(anthropic_wire.encode_usage(usage)) == usage
    assert (usage + usage).web_search_requests == 6


def test_response_round_trip_and_stop_reasons() -> None:
    resp = ChatResponse(
        id="msg_1",
        model="claude-sonnet-4-5",
        content=(TextPart("Let me look."), ToolUsePart("toolu_2", "read_file", '{"path":"a"}')),
        stop_reason="tool_use",
        usage=Usage(3, 4, 5, 6),
    )
    wire = anthropic_wire.encode_response(resp)
    assert wire == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "a"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 3,
            "cache_creation_input_tokens": 6,
            "cache_read_input_tokens": 5,
            "output_tokens": 4,
        },
    }
    assert anthropic_wire.decode_response(wire) == resp
    stopped = dict(wire, stop_reason="stop_sequence", stop_sequence="END")
    decoded = anthropic_wire.decode_response(stopped)
    assert (decoded.stop_reason, decoded.stop_sequence) == ("stop_sequence", "END")
    assert anthropic_wire.decode_response(dict(wire, stop_reason="max_tokens")).stop_reason == (
        "length"
    )


def test_error_body_shape() -> None:
    assert orjson.loads(anthropic_wire.encode_error("slow down", "rate_limit_error")) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": "read", "description": "Read", "input_schema": SCHEMA}],
        [
            {"name": "read", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        [{"name": 5, "input_schema": SCHEMA}],
        [{"name": "read", "input_schema": "no"}],
        "not a list",
    ],
)
def test_memoised_tool_lists_decode_as_the_plain_path(tools: object) -> None:
    """The chat door's memo for this wire: the same request or the same error (the tools are
    decoded where the plain path decodes them: after the messages, before tool_choice), and
    the same read-only objects for the same list on the next call."""
    from adapters.wire.openai import ToolListMemo

    memo = ToolListMemo(decode=anthropic_wire.decode_tools)
    body = {**AGENT_BODY, "tools": tools, "tool_choice": {"type": "sometimes"}}
    for candidate in (body, {**body, "tool_choice": {"type": "auto"}}):
        raw = orjson.dumps(candidate)
        try:
            want: object = anthropic_wire.decode_request(orjson.loads(raw))
        except WireFormatError as exc:
            want = exc.field
        for _ in range(2):
            try:
                got: object = anthropic_wire.decode_request(orjson.loads(raw), tool_lists=memo)
            except WireFormatError as exc:
                got = exc.field
            assert got == want
    if not isinstance(want, str):
        again = anthropic_wire.decode_request(orjson.loads(raw), tool_lists=memo)
        assert isinstance(got, ChatRequest) and again.tools is got.tools
