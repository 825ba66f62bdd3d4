"""Builders for canonical requests and raw bodies used across the cachekeys tests."""

from __future__ import annotations

from adapters.types import (
    ChatRequest,
    Message,
    TextPart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
    WireFormat,
)
from adapters.wire.codec import codec_for
from cachekeys.normalise import NormaliseOptions, normalise
from gateway.core.prompt_view import typed_view


def schema(*names: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {n: {"type": "string"} for n in names},
        "required": list(names),
    }


def tool(name: str, description: str = "does things") -> ToolSpec:
    return ToolSpec(name, description, schema("b", "a"))


def agent_request(
    *,
    system: str = "You are a careful agent.",
    turns: int = 1,
    tools: tuple[str, ...] = ("search", "edit"),
) -> ChatRequest:
    messages = [Message("user", (TextPart("Fix the bug."),))]
    for t in range(1, turns):
        messages.append(
            Message("assistant", (ToolUsePart(f"call_{t}", "search", '{"q":"x","n":1}'),))
        )
        messages.append(Message("user", (ToolResultPart(f"call_{t}", (TextPart(f"result {t}"),)),)))
    return ChatRequest(
        model="claude-sonnet-4-5",
        messages=tuple(messages),
        system=(TextPart(system),),
        tools=tuple(tool(n) for n in tools),
    )


def words(n: int) -> str:
    """Text of exactly n tokens under the word counter used in these tests."""
    return " ".join(["w"] * n)


def count_words(text: str) -> int:
    return len(text.split())


def normalised(
    request: ChatRequest, options: NormaliseOptions, wire: WireFormat = "openai"
) -> ChatRequest:
    """`request` sent on `wire`, normalised, and read back as the gateway reads it: the typed
    view of the normalised body."""
    codec = codec_for(wire)
    body = codec.encode_request(request)
    return typed_view(wire, body, normalise(wire, body, options), codec.decode_request(body))
