"""The typed view of a normalised body: the canonical request, decoded from the wire JSON that
cachekeys edited, so each normalisation rule is written once (over the JSON) and the typed
request can never disagree with what is forwarded.

Pure. Only what the edits replaced is decoded again: cachekeys copies just the containers it
edits, so a tool or message object that is still the client's own keeps its decoded part.
Must not edit anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from adapters.records import evolve
from adapters.types import JSON, ChatRequest, Message, TextPart, ToolSpec, WireFormat
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from adapters.wire.codec import codec_for

T = TypeVar("T")
SYSTEM_ROLES = ("system", "developer")


def typed_view(
    wire: WireFormat,
    sent: Mapping[str, JSON],
    edited: Mapping[str, JSON],
    request: ChatRequest,
    tool_lists: ToolLists | None = None,
) -> ChatRequest:
    """`request` (decoded from the client's `sent` body) as decoded from `edited`, the body
    after normalisation and isolation. `tool_lists`: edited tool lists decoded once each."""
    changes = typed_changes(wire, sent, edited, request, tool_lists)
    return evolve(request, **changes) if changes else request


def typed_changes(
    wire: WireFormat,
    sent: Mapping[str, JSON],
    edited: Mapping[str, JSON],
    request: ChatRequest,
    tool_lists: ToolLists | None = None,
) -> dict[str, Any]:
    """`typed_view` as the fields of `request` it changes (the caller makes the one copy)."""
    changes: dict[str, Any] = {}
    edited_tools = edited.get("tools")
    if edited_tools is not sent.get("tools"):
        if tool_lists is not None and edited_tools:
            changes["tools"] = tool_lists.decode(wire, edited_tools)
        else:
            changes["tools"] = _tools(wire, sent.get("tools"), edited_tools, request.tools)
    if wire == "anthropic":
        if edited.get("system") is not sent.get("system"):
            changes["system"] = anthropic_wire.decode_system(edited.get("system"))
        if edited.get("messages") is not sent.get("messages"):
            changes["messages"] = _reused(
                sent["messages"],
                request.messages,
                edited["messages"],
                anthropic_wire.decode_message,
                "messages",
            )
    elif edited.get("messages") is not sent.get("messages"):
        changes["system"], changes["messages"] = _openai_turns(sent, edited, request)
    return changes


class ToolLists:
    """Each wire's normalised tool lists, decoded once per list (`ToolListMemo`). Canonical JSON
    gives every call new tool objects, so the client's decoded tools cannot be reused; an agent
    sends the same list on every call, and decoding its tools again costs ~50 µs a call."""

    def __init__(self) -> None:
        self._memos = {
            "openai": openai_wire.ToolListMemo(decode=openai_wire.decode_tools),
            "anthropic": openai_wire.ToolListMemo(decode=anthropic_wire.decode_tools),
        }

    def decode(self, wire: WireFormat, tools: JSON) -> tuple[ToolSpec, ...]:
        return self._memos[wire].decode(tools)


def _tools(
    wire: WireFormat, sent: JSON, edited: JSON, typed: tuple[ToolSpec, ...]
) -> tuple[ToolSpec, ...]:
    codec = codec_for(wire)
    if not edited:
        return ()
    before = [t for t in sent or () if codec.is_typed_tool(t)]
    after = [t for t in edited if codec.is_typed_tool(t)]
    return _reused(before, typed, after, lambda tool, _: codec.decode_tools([tool])[0], "tools")


def _openai_turns(
    sent: Mapping[str, JSON], edited: Mapping[str, JSON], request: ChatRequest
) -> tuple[tuple[TextPart, ...], tuple[Message, ...]]:
    """OpenAI's leading system and developer messages are the typed request's `system`."""
    sent_messages, messages = sent["messages"], edited["messages"]
    sent_lead, lead = _num_leading_system(sent_messages), _num_leading_system(messages)
    system = request.system
    same_lead = sent_lead == lead and all(
        a is b for a, b in zip(sent_messages[:sent_lead], messages[:lead], strict=True)
    )
    if not same_lead:
        decoded = [
            openai_wire.decode_message(m, f"messages[{i}]") for i, m in enumerate(messages[:lead])
        ]
        system = tuple(p for m in decoded for p in m.content if isinstance(p, TextPart))
    rest = _reused(
        sent_messages[sent_lead:],
        request.messages,
        messages[lead:],
        openai_wire.decode_message,
        "messages",
    )
    return system, rest


def _num_leading_system(messages: Sequence[JSON]) -> int:
    n = 0
    while (
        n < len(messages)
        and isinstance(messages[n], Mapping)
        and messages[n].get("role") in SYSTEM_ROLES
    ):
        n += 1
    return n


def _reused(
    sent: Sequence[JSON],
    typed: Sequence[T],
    edited: Sequence[JSON],
    decode: Callable[[Any, str], T],
    path: str,
) -> tuple[T, ...]:
    """The typed items of `edited`: an item that is one of `sent` (the same object) keeps its
    decoded item from `typed`; any other is decoded. `sent` is alive, so no id is reused."""
    known = {id(raw): item for raw, item in zip(sent, typed, strict=True)}
    return tuple(
        [
            known[id(raw)] if id(raw) in known else decode(raw, f"{path}[{i}]")
            for i, raw in enumerate(edited)
        ]
    )
