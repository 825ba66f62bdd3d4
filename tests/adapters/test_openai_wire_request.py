"""OpenAI chat request JSON <-> canonical: the agent-body golden, round trips, roles, tools,
cache_control, the tool-list memo, and errors that name the JSON path."""

from __future__ import annotations

import pytest

from adapters.errors import WireFormatError
from adapters.types import (
    CacheControl,
    ChatRequest,
    ImagePart,
    Message,
    TextPart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
)
from adapters.wire import openai as openai_wire

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


AGENT_BODY = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Paris?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
        {"role": "user", "content": "Thanks", "name": "ann"},
    ],
    "tools": [WEATHER_TOOL],
    "tool_choice": "auto",
    "max_tokens": 50,
    "temperature": 0.2,
    "stop": ["\n\n"],
    "user": "u-42",
    "prompt_cache_key": "session-7",
    "seed": 3,
}


def test_decode_agent_body_golden() -> None:
    req = openai_wire.decode_request(AGENT_BODY)
    assert req == ChatRequest(
        model="gpt-4o-mini",
        system=(TextPart("You are terse."),),
        messages=(
            Message(
                "user",
                (
                    TextPart("Weather in Paris?"),
                    ImagePart(media_type="image/png", data_b64="iVBORw0K"),
                ),
            ),
            Message("assistant", (ToolUsePart("call_1", "get_weather", '{"city":"Paris"}'),)),
            Message("tool", (ToolResultPart("call_1", (TextPart("18C, cloudy"),)),)),
            Message("user", (TextPart("Thanks"),), name="ann"),
        ),
        tools=(
            ToolSpec("get_weather", "Weather for a city", WEATHER_TOOL["function"]["parameters"]),
        ),
        tool_choice="auto",
        max_tokens=50,
        temperature=0.2,
        stop=("\n\n",),
        user="u-42",
        prompt_cache_key="session-7",
        extra={"seed": 3},
    )


def test_round_trip_preserves_the_body() -> None:
    assert openai_wire.encode_request(openai_wire.decode_request(AGENT_BODY)) == AGENT_BODY


def test_max_completion_tokens_wins_and_stream_options_kept() -> None:
    body = {
        "model": "o3",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 10,
        "max_completion_tokens": 99,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_salt": "tenant-a",
    }
    req = openai_wire.decode_request(body)
    assert (req.max_tokens, req.stream, req.cache_salt) == (99, True, "tenant-a")
    assert openai_wire.include_usage(body) is True
    assert openai_wire.include_usage({"stream": True}) is False
    assert openai_wire.encode_request(req)["stream_options"] == {"include_usage": True}


def test_developer_role_and_named_tool_choice() -> None:
    req = openai_wire.decode_request(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": "go"},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        }
    )
    assert req.system == (TextPart("rules"),)
    assert req.tool_choice == {"name": "get_weather"}
    assert openai_wire.encode_request(req)["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }


def test_unrepresentable_parts_and_custom_tools_are_skipped() -> None:
    req = openai_wire.decode_request(
        {
            "model": "gpt-5",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "listen"},
                        {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}},
                        {"type": "file", "file": {"file_id": "file-1"}},
                    ],
                }
            ],
            "tools": [{"type": "custom", "custom": {"name": "grammar_tool"}}, WEATHER_TOOL],
        }
    )
    assert req.messages == (Message("user", (TextPart("listen"),)),)
    assert [t.name for t in req.tools] == ["get_weather"]


def test_empty_content_encodes_as_empty_string() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": ""},
            {"role": "tool", "tool_call_id": "c", "content": ""},
        ],
    }
    assert openai_wire.encode_request(openai_wire.decode_request(body)) == body


def test_cache_control_on_parts_is_decoded_and_only_emitted_on_request() -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "big doc",
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
            }
        ],
    }
    req = openai_wire.decode_request(body)
    assert req.messages[0].content == (TextPart("big doc", CacheControl("1h")),)
    assert openai_wire.encode_request(req)["messages"] == [{"role": "user", "content": "big doc"}]
    assert openai_wire.encode_request(req, cache_control=True)["messages"] == body["messages"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": []}, "model"),
        ({"model": "m", "messages": "hi"}, "messages"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "wizard"}]},
            "messages[1].role",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            },
            "messages[0].content[0].text",
        ),
        (
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]},
            "messages[0].tool_calls[0].function",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "r"}]},
            "messages[0].tool_call_id",
        ),
        ({"model": "m", "messages": [], "max_tokens": "10"}, "max_tokens"),
        ({"model": "m", "messages": [], "max_tokens": True}, "max_tokens"),
        ({"model": "m", "messages": [], "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"model": "m", "messages": [], "stop": [1]}, "stop[0]"),
    ],
)
def test_errors_name_the_json_path(body: dict, field: str) -> None:
    with pytest.raises(WireFormatError) as info:
        openai_wire.decode_request(body)
    assert info.value.field == field


def test_tool_list_memo_decodes_as_the_plain_path_with_objects_of_its_own() -> None:
    import copy

    memo = openai_wire.ToolListMemo(max_entries=2)
    cached_tool = {**WEATHER_TOOL, "cache_control": {"type": "ephemeral"}}
    custom = {"type": "custom", "custom": {"name": "x"}}
    for tools in ([WEATHER_TOOL], [WEATHER_TOOL, cached_tool], [custom, WEATHER_TOOL]):
        body = copy.deepcopy({**AGENT_BODY, "tools": tools})
        first = openai_wire.decode_request(body, memo)
        assert first == openai_wire.decode_request(copy.deepcopy(body))
        body["tools"][-1]["function"]["parameters"]["required"].append("mutated")  # the caller's
        again = openai_wire.decode_request(copy.deepcopy({**AGENT_BODY, "tools": tools}), memo)
        assert again.tools is first.tools  # one decode, shared read-only objects
        assert again.tools[-1].input_schema["required"] == ["city"]  # not the caller's dict
    assert len(memo) == 1  # a bound: cleared when full, the last list kept
    # equal under `==` is not equal JSON: 1 and 1.0 and true are three lists
    schemas = [{"type": "object", "default": v} for v in (1, 1.0, True)]
    decoded = [
        memo.decode([{"type": "function", "function": {"name": "f", "parameters": s}}])
        for s in schemas
    ]
    assert [repr(d[0].input_schema["default"]) for d in decoded] == ["1", "1.0", "True"]
    with pytest.raises(WireFormatError) as info:  # errors as the plain decode, nothing kept
        memo.decode([{"type": "function"}])
    assert info.value.field == "tools[0].function"
