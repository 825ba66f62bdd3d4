"""What maps across a translation, at the codecs: web citations (Anthropic
`web_search_result_location` <-> canonical <-> OpenAI chat `annotations` and Responses
`output_text.annotations`, streamed and not) and reasoning and audio token counts, every body
valid against OpenAI's published schemas (tests/openapi/). The replies are the provider-shaped
ones of tests/fakes/today.py."""

from __future__ import annotations

from typing import Any

import orjson

from adapters.sse import SSEParser
from adapters.types import (
    ChatResponse,
    Citation,
    StreamEnd,
    StreamStart,
    TextCitation,
    TextDelta,
    TextPart,
    Usage,
)
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.anthropic import AnthropicStreamDecoder, AnthropicStreamEncoder
from adapters.wire.openai import OpenAIStreamDecoder, OpenAIStreamEncoder
from adapters.wire.responses import (
    ResponsesStreamEncoder,
    encode_response,
    envelope,
    parse_request,
)
from tests.fakes import today
from tests.openapi.openai_schema import check

WHOLE = Citation(
    today.URL,
    today.TITLE,
    cited_text=today.TEXT,
    encrypted_index=today.CITATION["encrypted_index"],
)
SPAN = {"url": today.URL, "title": today.TITLE, "start_index": 0, "end_index": len(today.TEXT)}
RESPONSES_BODY = {"model": "m", "input": "news?", "store": False}


def _anthropic_events() -> list[Any]:
    decoder = AnthropicStreamDecoder()
    out = []
    for frame in today.anthropic_frames():
        for event in SSEParser().feed(frame):
            out += decoder.feed(event.data)
    return out


def test_an_anthropic_web_citation_decodes_and_comes_back_as_it_was() -> None:
    decoded = anthropic_wire.decode_response(today.anthropic_message())
    assert decoded.content == (TextPart(today.TEXT, citations=(WHOLE,)),)
    text_block = anthropic_wire.encode_response(decoded)["content"][0]
    assert text_block == today.anthropic_message()["content"][2]


def test_anthropic_citations_become_chat_annotations_over_the_joined_text() -> None:
    before, after = "Searching. ", " More soon."
    reply = today.anthropic_message()
    reply["content"] = [
        {"type": "text", "text": before},
        reply["content"][2],
        {"type": "text", "text": after, "citations": [{**today.CITATION, "type": "char_location"}]},
    ]
    body = openai_wire.encode_response(anthropic_wire.decode_response(reply), created=1)
    check("CreateChatCompletionResponse", body)
    message = body["choices"][0]["message"]
    assert message["content"] == before + today.TEXT + after
    start = len(before)
    assert message["annotations"] == [  # the document citation has no URL: not carried
        {"type": "url_citation", "url_citation": {**SPAN, "start_index": start,
                                                  "end_index": start + len(today.TEXT)}}
    ]  # fmt: skip


def test_no_citation_no_annotations_key() -> None:
    answer = ChatResponse("x", "m", (TextPart("plain"),), "stop", Usage(1, 1))
    message = openai_wire.encode_response(answer, created=1)["choices"][0]["message"]
    assert "annotations" not in message
    item = encode_response("resp_a", parse_request(RESPONSES_BODY), answer, 1)["output"][0]
    assert item["content"][0]["annotations"] == []


def test_an_anthropic_citation_reaches_a_responses_client_streamed_and_not() -> None:
    req = parse_request(RESPONSES_BODY)
    decoded = anthropic_wire.decode_response(today.anthropic_message())
    reply = encode_response("resp_a", req, decoded, 1)
    check("Response", reply)
    assert reply["output"][0]["content"][0]["annotations"] == [{"type": "url_citation", **SPAN}]
    encoder = ResponsesStreamEncoder(envelope("resp_a", req, 1))
    raw = b"".join(encoder.encode(e) for e in _anthropic_events())
    events = [orjson.loads(e.data) for e in SSEParser().feed(raw)]
    for event in events:
        check("ResponseStreamEvent", event)
    added = [e for e in events if e["type"] == "response.output_text.annotation.added"]
    assert [(e["annotation_index"], e["annotation"]) for e in added] == [
        (0, {"type": "url_citation", **SPAN})
    ]
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["annotations"] == [{"type": "url_citation", **SPAN}]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_streamed_chat_reply_carries_no_annotations_and_stays_valid() -> None:
    """OpenAI's chunk schema has no annotations: the citation is not sent in a stream."""
    events = _anthropic_events()
    assert TextCitation(2, WHOLE) in events
    encoder = OpenAIStreamEncoder(include_usage=True, created=1, model="m")
    raw = b"".join(encoder.encode(e) for e in events)
    chunks = [orjson.loads(e.data) for e in SSEParser().feed(raw) if e.data != "[DONE]"]
    for chunk in chunks:
        check("CreateChatCompletionStreamResponse", chunk)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == today.TEXT
    assert b"annotations" not in raw
    assert b"tool_calls" not in raw  # the web search's input is the provider's, no tool call


def test_an_anthropic_stream_encoder_sends_a_citation_only_with_its_encrypted_index() -> None:
    encoder = AnthropicStreamEncoder(model="m")
    foreign = Citation(today.URL, today.TITLE, 0, 7)
    events = [StreamStart("msg_1", "m"), TextCitation(0, WHOLE), TextCitation(0, foreign)]
    events += [TextDelta(0, today.TEXT), StreamEnd("stop", Usage(1, 2))]
    raw = b"".join(encoder.encode(e) for e in events)
    deltas = [
        orjson.loads(e.data)["delta"]
        for e in SSEParser().feed(raw)
        if e.event == "content_block_delta"
    ]
    assert deltas == [
        {"type": "citations_delta", "citation": today.CITATION},
        {"type": "text_delta", "text": today.TEXT},
    ]


def test_openai_annotations_and_reasoning_tokens_reach_the_other_doors() -> None:
    decoded = openai_wire.decode_response(today.openai_reply())
    cited = Citation(today.URL, today.TITLE, 0, len(today.TEXT))
    assert decoded.content == (TextPart(today.TEXT, citations=(cited,)),)
    assert decoded.usage == Usage(19, 33, reasoning_tokens=27)
    # chat: a round trip keeps both
    again = openai_wire.encode_response(decoded, created=today.CREATED)
    check("CreateChatCompletionResponse", again)
    assert again["choices"][0]["message"] == today.openai_reply()["choices"][0]["message"]
    assert again["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 27,
        "audio_tokens": 0,
    }
    # Responses: the annotation and the reasoning count
    reply = encode_response("resp_a", parse_request(RESPONSES_BODY), decoded, 1)
    check("Response", reply)
    assert reply["output"][0]["content"][0]["annotations"] == [{"type": "url_citation", **SPAN}]
    assert reply["usage"]["output_tokens_details"] == {"reasoning_tokens": 27}
    # Anthropic: a url_citation has no encrypted_index, so no faithful citation
    block = anthropic_wire.encode_response(decoded)["content"][0]
    assert block == {"type": "text", "text": today.TEXT}


def test_streamed_openai_annotations_and_usage_details_decode() -> None:
    note = today.openai_reply()["choices"][0]["message"]["annotations"]
    chunks = today.openai_chunks(include_usage=True)
    chunks[2]["choices"][0]["delta"]["annotations"] = note
    decoder = OpenAIStreamDecoder()
    events = [e for c in chunks for e in decoder.feed(orjson.dumps(c).decode())]
    events += decoder.finish()
    cited = Citation(today.URL, today.TITLE, 0, len(today.TEXT))
    assert [e for e in events if isinstance(e, TextCitation)] == [TextCitation(0, cited)]
    end = events[-1]
    assert isinstance(end, StreamEnd) and end.usage == Usage(19, 33, reasoning_tokens=27)


def test_usage_details_decode_and_encode_and_add_up() -> None:
    wire = {
        "prompt_tokens": 40,
        "completion_tokens": 30,
        "total_tokens": 70,
        "prompt_tokens_details": {"cached_tokens": 8, "audio_tokens": 5},
        "completion_tokens_details": {"reasoning_tokens": 20, "audio_tokens": 4},
    }
    usage = openai_wire.decode_usage(wire)
    assert usage == Usage(32, 30, 8, reasoning_tokens=20, audio_input_tokens=5,
                          audio_output_tokens=4)  # fmt: skip
    assert openai_wire.encode_usage(usage) == {
        **wire,
        "completion_tokens_details": {"reasoning_tokens": 20, "audio_tokens": 4},
    }
    assert usage + usage == Usage(64, 60, 16, reasoning_tokens=40, audio_input_tokens=10,
                                  audio_output_tokens=8)  # fmt: skip
    assert "completion_tokens_details" not in openai_wire.encode_usage(Usage(3, 4))


def test_malformed_annotations_are_skipped_not_an_error() -> None:
    reply = today.openai_reply()
    reply["choices"][0]["message"]["annotations"] = [
        {"type": "url_citation", "url_citation": {"url": today.URL, "title": today.TITLE}},
        {"type": "file_citation", "file_citation": {"file_id": "f"}},
        "junk",
    ]
    assert openai_wire.decode_response(reply).content == (TextPart(today.TEXT),)
