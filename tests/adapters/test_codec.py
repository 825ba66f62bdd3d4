"""`codec_for`: each chat wire behind the one interface, doing what its package's functions do."""

from __future__ import annotations

from adapters.types import TextDelta
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.codec import codec_for

OPENAI_BODY = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
ANTHROPIC_BODY = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}


def test_each_wire_has_its_codec_and_door() -> None:
    assert (codec_for("openai").wire, codec_for("openai").door) == ("openai", "chat.completions")
    assert (codec_for("anthropic").wire, codec_for("anthropic").door) == ("anthropic", "messages")


def test_a_codec_decodes_and_encodes_as_its_package_does() -> None:
    for wire, package, body in (
        ("openai", openai_wire, OPENAI_BODY),
        ("anthropic", anthropic_wire, ANTHROPIC_BODY),
    ):
        codec = codec_for(wire)  # type: ignore[arg-type]
        request = codec.decode_request(body)
        assert request == package.decode_request(body)
        assert codec.encode_request(request) == package.encode_request(request)


def test_errors_in_a_started_stream_are_framed_as_each_provider_does() -> None:
    assert codec_for("openai").error_event(b"{}") == b"data: {}\n\n"
    assert codec_for("anthropic").error_event(b"{}") == b"event: error\ndata: {}\n\n"


def test_stream_encoders_speak_their_wire() -> None:
    openai = codec_for("openai").stream_encoder(OPENAI_BODY, "m", 3)
    anthropic = codec_for("anthropic").stream_encoder(ANTHROPIC_BODY, "m", 3)
    assert openai(TextDelta(index=0, text="Hi")).startswith(b"data: {")
    events = anthropic(TextDelta(index=0, text="Hi")).split(b"\n\n")
    assert [e.split(b"\n")[0] for e in events if e] == [
        b"event: content_block_start",
        b"event: content_block_delta",
    ]
