"""Streaming codecs: SSE framing, encoder -> bytes -> decoder round trips, exact event order."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.errors import ProviderRateLimited, ProviderUnavailable
from adapters.sse import SSEParser, SSEvent, frame
from adapters.types import (
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    Usage,
)
from adapters.wire.anthropic import AnthropicStreamDecoder, AnthropicStreamEncoder
from adapters.wire.anthropic.relay import AnthropicRelay
from adapters.wire.openai import OpenAIRelay, OpenAIStreamDecoder, OpenAIStreamEncoder
from tests.fakes import today

EVENTS: list[StreamEvent] = [
    StreamStart("id-1", "model-x"),
    TextDelta(0, "Hello"),
    TextDelta(0, " world"),
    ToolCallStart(1, "call_1", "search"),
    ToolCallDelta(1, '{"q":'),
    ToolCallDelta(1, '"x"}'),
    ToolCallStart(2, "call_2", "fetch"),
    ToolCallDelta(2, "{}"),
    StreamEnd("tool_use", Usage(10, 7, 90, 5)),
]


def test_sse_parser_handles_split_chunks_crlf_comments_and_multiline() -> None:
    raw = b': keep-alive\r\nevent: a\r\ndata: {"x":1}\r\n\r\ndata: line1\ndata: line2\n\ndata: tail'
    parser = SSEParser()
    events = []
    for i in range(0, len(raw), 3):
        events += parser.feed(raw[i : i + 3])
    events += parser.close()
    assert events == [SSEvent("a", '{"x":1}'), SSEvent("", "line1\nline2"), SSEvent("", "tail")]
    assert frame(b"{}") == b"data: {}\n\n"
    assert frame(b"{}", "ping") == b"event: ping\ndata: {}\n\n"


class _LineParser:
    """The parser as it was, line by line through a method: the reference for `SSEParser`."""

    def __init__(self) -> None:
        self.buffer, self.event, self.data = b"", "", list[str]()

    def feed(self, chunk: bytes) -> list[SSEvent]:
        buffer, events, start = self.buffer + chunk, list[SSEvent](), 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line, start = buffer[start:end], end + 1
            event = self.take(line.removesuffix(b"\r").decode("utf-8"))
            if event is not None:
                events.append(event)
        self.buffer = buffer[start:]
        return events

    def take(self, line: str) -> SSEvent | None:
        if not line:
            if not self.data:
                self.event = ""
                return None
            event = SSEvent(self.event, "\n".join(self.data))
            self.event, self.data = "", []
            return event
        if line[0] == ":":
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value
        return None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                b'data: {"a":1}',
                b"data:x",
                b"data",
                b"event: e",
                b"event:",
                b": c",
                b":",
                b"",
                b"id: 3",
                b"retry: 5",
                b"data: \xc3\xa9",
                b"dat",
                b"data:  two",
            ]
        ),
        max_size=12,
    ),
    st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=12, max_size=12),
    st.lists(st.integers(1, 9), max_size=8),
)
def test_sse_parser_reads_as_the_line_by_line_parser(
    lines: list[bytes], ends: list[bytes], cuts: list[int]
) -> None:
    raw = b"".join(line + end for line, end in zip(lines, ends, strict=False)) + b"data: tail"
    fast, reference = SSEParser(), _LineParser()
    got, want, at = [], [], 0
    for size in [*cuts, len(raw)]:
        piece, at = raw[at : at + size], at + size
        got += fast.feed(piece)
        want += reference.feed(piece)
        assert (fast._event, fast._data) == (reference.event, reference.data)
    assert got == want


def _parse(data: bytes) -> list[SSEvent]:
    parser = SSEParser()
    return parser.feed(data) + parser.close()


def test_openai_round_trip_with_usage() -> None:
    encoder = OpenAIStreamEncoder(include_usage=True, created=5)
    wire = b"".join(encoder.encode(e) for e in EVENTS)
    frames = _parse(wire)
    assert frames[-1].data == "[DONE]"
    usage_chunk = orjson.loads(frames[-2].data)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 105,
        "completion_tokens": 7,
        "total_tokens": 112,
        "prompt_tokens_details": {"cached_tokens": 90, "cache_write_tokens": 5},
    }
    assert all(orjson.loads(f.data)["usage"] is None for f in frames[:-2])
    tool_chunk = orjson.loads(frames[3].data)["choices"][0]["delta"]
    assert tool_chunk == {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": ""},
            }
        ]
    }
    decoder = OpenAIStreamDecoder()
    decoded = [e for f in frames for e in decoder.feed(f.data)]
    assert decoded == EVENTS


def test_openai_encoder_without_usage_omits_the_usage_chunk() -> None:
    encoder = OpenAIStreamEncoder(include_usage=False, created=5)
    frames = _parse(b"".join(encoder.encode(e) for e in EVENTS))
    chunks = [orjson.loads(f.data) for f in frames[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_openai_decoder_reports_missing_finish_and_upstream_errors() -> None:
    decoder = OpenAIStreamDecoder("b1")
    decoder.feed('{"id":"a","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}')
    assert decoder.saw_finish_reason is False
    with pytest.raises(ProviderUnavailable):
        OpenAIStreamDecoder("b1").feed('{"error":{"message":"boom"}}')


def test_anthropic_round_trip_and_event_sequence() -> None:
    encoder = AnthropicStreamEncoder(start_usage=Usage(10, 0, 90, 5))
    frames = _parse(b"".join(encoder.encode(e) for e in EVENTS))
    assert [f.event for f in frames] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = orjson.loads(frames[0].data)["message"]
    assert start["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 90,
        "output_tokens": 1,
    }
    assert [orjson.loads(f.data).get("index") for f in frames[2:13]] == [
        0,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
        2,
        2,
        2,
    ]
    delta = orjson.loads(frames[-2].data)
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 7
    decoder = AnthropicStreamDecoder()
    decoded = [e for f in frames for e in decoder.feed(f.data)]
    # the Anthropic door's ids are `msg_` ids; message_start's usage is reported as it came
    assert decoded == [StreamStart("msg_id-1", "model-x", Usage(10, 1, 90, 5)), *EVENTS[1:]]


def test_openai_stream_translates_into_anthropic_events() -> None:
    """Cross-wire: an OpenAI upstream's chunks re-encoded for an Anthropic client."""
    upstream = OpenAIStreamEncoder(include_usage=True)
    openai_bytes = b"".join(upstream.encode(e) for e in EVENTS)
    decoder = OpenAIStreamDecoder()
    encoder = AnthropicStreamEncoder()
    anthropic_bytes = b"".join(
        encoder.encode(e) for f in _parse(openai_bytes) for e in decoder.feed(f.data)
    )
    back = AnthropicStreamDecoder()
    start = StreamStart("msg_id-1", "model-x", Usage(0, 1))
    assert [e for f in _parse(anthropic_bytes) for e in back.feed(f.data)] == [start, *EVENTS[1:]]


def test_anthropic_decoder_error_events_are_typed() -> None:
    with pytest.raises(ProviderRateLimited):
        AnthropicStreamDecoder().feed(
            '{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}'
        )
    with pytest.raises(ProviderUnavailable):
        AnthropicStreamDecoder().feed(
            '{"type":"error","error":{"type":"overloaded_error","message":"busy"}}'
        )


def test_anthropic_decoder_takes_late_usage_fields() -> None:
    decoder = AnthropicStreamDecoder()
    decoder.feed(
        '{"type":"message_start","message":{"id":"m","model":"c","usage":'
        '{"input_tokens":3,"cache_read_input_tokens":50,"output_tokens":1}}}'
    )
    decoder.feed(
        '{"type":"message_delta","delta":{"stop_reason":"max_tokens",'
        '"stop_sequence":null},"usage":{"output_tokens":12}}'
    )
    assert decoder.feed('{"type":"message_stop"}') == [StreamEnd("length", Usage(3, 12, 50, 0))]


def test_anthropic_decoder_counts_the_streams_web_searches() -> None:
    """The search count `message_delta` reports (cumulative, as every usage field there)."""
    decoder = AnthropicStreamDecoder()
    decoder.feed(
        '{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3}}}'
    )
    decoder.feed(
        '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"output_tokens":12,"server_tool_use":{"web_search_requests":2}}}'
    )
    end = decoder.feed('{"type":"message_stop"}')
    assert end == [StreamEnd("stop", Usage(3, 12, web_search_requests=2))]


def test_a_server_tools_input_is_no_tool_call() -> None:
    """A web search's `server_tool_use` input streams as `input_json_delta` too: the provider
    ran the tool, so no client of another wire may see a call to make."""
    decoder = AnthropicStreamDecoder()
    events = []
    for raw in today.anthropic_frames():
        for sse in SSEParser().feed(raw):
            events += decoder.feed(sse.data)
    assert not [e for e in events if isinstance(e, ToolCallStart | ToolCallDelta)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == today.TEXT


def test_a_tool_calls_input_in_its_block_start_is_its_arguments() -> None:
    """An Anthropic stream may carry a tool call's whole input in `content_block_start` with no
    `input_json_delta`; the SDK then keeps the start's input, and deltas, where they come,
    replace it. A client of the other wire gets the same arguments, never an empty call."""

    def block(index: int, given: dict[str, str], *deltas: str) -> list[StreamEvent]:
        start = {"type": "tool_use", "id": f"toolu_0{index}", "name": "search", "input": given}
        events = decoder.feed_event(
            {"type": "content_block_start", "index": index, "content_block": start}
        )
        for part in deltas:
            delta = {"type": "input_json_delta", "partial_json": part}
            events += decoder.feed_event(
                {"type": "content_block_delta", "index": index, "delta": delta}
            )
        return events + decoder.feed_event({"type": "content_block_stop", "index": index})

    decoder = AnthropicStreamDecoder()
    assert block(0, {"q": "lantern"}) == [
        ToolCallStart(0, "toolu_00", "search"),
        ToolCallDelta(0, '{"q":"lantern"}'),
    ]
    assert block(1, {}, '{"q":', '"x"}') == [
        ToolCallStart(1, "toolu_01", "search"),
        ToolCallDelta(1, '{"q":'),
        ToolCallDelta(1, '"x"}'),
    ]
    assert block(2, {"q": "start"}, '{"q":"delta"}') == [
        ToolCallStart(2, "toolu_02", "search"),
        ToolCallDelta(2, '{"q":"delta"}'),
    ]


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_a_relayed_event_whose_data_spans_lines_reaches_the_client_whole(wire: str) -> None:
    """SSE lets a server split one event's data over several `data:` lines; the relay must
    frame each line as one, or the client reads half a JSON object."""
    if wire == "openai":
        relay: OpenAIRelay | AnthropicRelay = OpenAIRelay("b", model="m", include_usage=False)
        event = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
        name = ""
    else:
        relay = AnthropicRelay("b", model="m")
        event = {"type": "message_start", "message": {"id": "msg_1", "model": "m"}}
        name = "message_start"
    pretty = orjson.dumps(event, option=orjson.OPT_INDENT_2)
    upstream = (f"event: {name}\n" if name else "").encode() + b"".join(
        b"data: " + line + b"\n" for line in pretty.split(b"\n")
    )
    (sent,) = SSEParser().feed(upstream + b"\n")
    chunk, error = relay.feed_all([sent])
    assert error is None and chunk is not None
    (got,) = SSEParser().feed(chunk.data)
    assert (got.event, orjson.loads(got.data)) == (name, event)
