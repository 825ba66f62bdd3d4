"""The Responses API codec: input items to canonical messages, the reply object, the SSE
events (parsed by the openai SDK's own models), and an upstream's native reply and stream."""

from __future__ import annotations

import orjson
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from adapters.errors import WireFormatError
from adapters.sse import SSEParser
from adapters.types import (
    ChatResponse,
    Message,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolResultPart,
    ToolUsePart,
    Usage,
)
from adapters.wire.responses import (
    ResponsesRelay,
    ResponsesStreamEncoder,
    decode_reply,
    encode_response,
    envelope,
    parse_request,
    to_chat_request,
)

BODY = {
    "model": "m",
    "instructions": "Be brief.",
    "input": [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "rainy"},
    ],
    "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": True}],
    "tool_choice": {"type": "function", "name": "w"},
    "max_output_tokens": 64,
}


def test_items_become_canonical_messages() -> None:
    chat = to_chat_request(parse_request(BODY))
    assert chat.system == (TextPart("Be brief."), TextPart("Use tools."))
    assert chat.messages == (
        Message("user", (TextPart("weather?"),)),
        Message("assistant", (ToolUsePart("c1", "w", "{}"), ToolUsePart("c2", "w", '{"a":1}'))),
        Message("tool", (ToolResultPart("c1", (TextPart("sunny"),)),)),
        Message("tool", (ToolResultPart("c2", (TextPart("rainy"),)),)),
    )
    assert (chat.tool_choice, chat.max_tokens, chat.tools[0].name) == ({"name": "w"}, 64, "w")


def test_history_comes_before_the_new_input() -> None:
    req = parse_request({"model": "m", "input": "again"})
    history = ({"type": "message", "role": "user", "content": "first"},)
    chat = to_chat_request(req, history)
    assert [m.content for m in chat.messages] == [(TextPart("first"),), (TextPart("again"),)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"model": "m", "input": [{"role": "critic", "content": "x"}]}, "input[0].role"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
        ),
        ({"model": "m", "input": "x", "max_tool_calls": 2}, "max_tool_calls"),
        ({"model": "m", "input": "x", "store": "yes"}, "store"),
        ({"model": "m", "input": [{"type": "function_call", "call_id": "c"}]}, "input[0].name"),
        # an object or an array where a name is expected: a 400, not a failed set lookup
        ({"model": "m", "input": [{"role": {}, "content": "x"}]}, "input[0].role"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": ["input_text"]}]}]},
            "input[0].content[0].type",
        ),
        ({"model": "m", "input": "x", "include": [{}]}, "include[0]"),
    ],
)
def test_bad_or_unsupported_input_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(WireFormatError) as err:
        to_chat_request(parse_request(body))
    assert err.value.field == field


ANSWER = ChatResponse(
    "x",
    "m",
    (TextPart("It is sunny."), ToolUsePart("c3", "w", '{"city":"Paris"}')),
    "tool_use",
    Usage(input_tokens=10, output_tokens=5, cache_read_tokens=20, cache_write_tokens=3),
)


def test_reply_object_parses_as_the_sdk_response() -> None:
    reply = encode_response("resp_abc", parse_request(BODY), ANSWER, 1_700_000_000)
    parsed = Response.model_validate(reply)
    assert parsed.output_text == "It is sunny."
    assert [item.type for item in parsed.output] == ["message", "function_call"]
    assert [item.id for item in parsed.output] == ["msg_abc_0", "fc_abc_1"]
    assert parsed.usage is not None
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (33, 5)
    assert parsed.usage.input_tokens_details.cached_tokens == 20
    assert parsed.usage.total_tokens == 38


def _stream_bytes() -> bytes:
    encoder = ResponsesStreamEncoder(envelope("resp_s", parse_request(BODY), 1_700_000_000))
    events = [
        StreamStart("up", "m"),
        TextDelta(0, "It is "),
        ToolCallStart(1, "c3", "w"),
        TextDelta(0, "sunny."),
        ToolCallDelta(1, '{"city":'),
        ToolCallDelta(1, '"Paris"}'),
        StreamEnd("tool_use", ANSWER.usage),
    ]
    return b"".join(encoder.encode(e) for e in events)


def test_stream_events_parse_as_the_sdk_events_in_sequence() -> None:
    adapter: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
    sse = SSEParser().feed(_stream_bytes())
    parsed = [adapter.validate_python(orjson.loads(e.data)) for e in sse]
    assert [e.type for e in parsed] == [e.event for e in sse]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    done = parsed[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == "It is sunny."
    call = done.response.output[1]
    assert call.type == "function_call" and call.arguments == '{"city":"Paris"}'


def test_a_native_stream_relayed_yields_the_same_canonical_answer() -> None:
    relay = ResponsesRelay("up")
    chunk = relay.feed_all(SSEParser().feed(_stream_bytes()))
    assert chunk is not None and chunk.format == "responses"
    assert chunk.data == _stream_bytes()  # forwarded byte for byte
    assert relay.ended
    texts = [e.text for e in chunk.events if isinstance(e, TextDelta)]
    args = [e.arguments_json for e in chunk.events if isinstance(e, ToolCallDelta)]
    assert ("".join(texts), "".join(args)) == ("It is sunny.", '{"city":"Paris"}')
    end = chunk.events[-1]
    assert isinstance(end, StreamEnd) and end.usage == ANSWER.usage


def test_a_native_reply_decodes_to_its_answer() -> None:
    reply = encode_response("resp_n", parse_request(BODY), ANSWER, 1_700_000_000)
    reply["output"].insert(0, {"type": "reasoning", "id": "rs_n", "summary": []})
    decoded = decode_reply(reply)
    assert (decoded.content, decoded.stop_reason, decoded.usage) == (
        ANSWER.content,
        "tool_use",
        ANSWER.usage,
    )
    assert decoded.native == reply
