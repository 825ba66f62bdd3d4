"""Responses API items (input and output) <-> canonical messages.

Pure functions at the JSON edge. Input is checked and normalised to explicit items (each with
its `type`), the form a stored conversation keeps; reasoning items are accepted and left out of
the canonical messages (no translated backend can take another model's reasoning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.errors import WireFormatError
from adapters.types import (
    JSON,
    ChatResponse,
    ContentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)
from adapters.wire.citations import spans
from adapters.wire.json_fields import expect

_ROLE: dict[str, Role] = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def normalise_input(value: Any) -> tuple[Mapping[str, JSON], ...]:
    """`input` as items: a string is one user message; each item is checked and typed."""
    if isinstance(value, str):
        return ({"type": "message", "role": "user", "content": value},)
    items = []
    for i, item in enumerate(expect(value, list, "input")):
        path = f"input[{i}]"
        expect(item, dict, path)
        kind = item.get("type", "message" if "role" in item else None)
        items.append(_checked(item, kind, path))
    return tuple(items)


def _checked(item: Mapping[str, Any], kind: Any, path: str) -> Mapping[str, JSON]:
    if kind == "message":
        if not isinstance(item.get("role"), str) or item["role"] not in _ROLE:
            raise WireFormatError(f"{path}.role", f"unsupported role {item.get('role')!r}")
        _message_parts(item.get("content"), f"{path}.content")
        return {**item, "type": "message"}
    if kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            expect(item.get(key), str, f"{path}.{key}")
        return item
    if kind == "function_call_output":
        expect(item.get("call_id"), str, f"{path}.call_id")
        _output_parts(item.get("output"), f"{path}.output")
        return item
    if kind == "reasoning":
        return item
    raise WireFormatError(f"{path}.type", f"input item type {kind!r} is not supported")


def _message_parts(value: Any, path: str) -> tuple[TextPart | ImagePart, ...]:
    if isinstance(value, str):
        return (TextPart(value),) if value else ()
    parts: list[TextPart | ImagePart] = []
    for i, part in enumerate(expect(value, list, path)):
        p = f"{path}[{i}]"
        kind = expect(part, dict, p).get("type")
        if not isinstance(kind, str):  # a set lookup of an object or array raises TypeError
            raise WireFormatError(f"{p}.type", "expected str")
        if kind in _TEXT_PARTS:
            parts.append(TextPart(expect(part.get("text"), str, f"{p}.text")))
        elif kind == "refusal":
            parts.append(TextPart(expect(part.get("refusal"), str, f"{p}.refusal")))
        elif kind == "input_image":
            parts.append(_image(part, p))
        else:
            raise WireFormatError(f"{p}.type", f"content part type {kind!r} is not supported")
    return tuple(parts)


def _image(part: Mapping[str, Any], path: str) -> ImagePart:
    url = part.get("image_url")
    if not isinstance(url, str):
        raise WireFormatError(f"{path}.image_url", "expected a URL (file ids are not supported)")
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return ImagePart(media_type=head[5:], data_b64=data)
    return ImagePart(url=url)


def _output_parts(value: Any, path: str) -> tuple[TextPart | ImagePart, ...]:
    """A function_call_output's `output`: a string, or a list of input content parts."""
    if isinstance(value, str):
        return (TextPart(value),)
    return _message_parts(value, path)


def items_to_messages(items: Sequence[Mapping[str, JSON]]) -> tuple[Message, ...]:
    """Canonical messages of normalised items: a function_call joins the assistant turn before
    it (one turn may ask for several tools); each output is a `tool` message."""
    messages: list[Message] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            parts = _message_parts(item.get("content"), "input")
            messages.append(Message(_ROLE[item["role"]], parts))
        elif kind == "function_call":
            use = ToolUsePart(item["call_id"], item["name"], item["arguments"])
            _join_assistant(messages, use)
        elif kind == "function_call_output":
            result = ToolResultPart(item["call_id"], _output_parts(item["output"], "input"))
            messages.append(Message("tool", (result,)))
    return tuple(messages)


def _join_assistant(messages: list[Message], part: ContentPart) -> None:
    if messages and messages[-1].role == "assistant":
        last = messages.pop()
        messages.append(Message("assistant", (*last.content, part)))
    else:
        messages.append(Message("assistant", (part,)))


# --- output ---------------------------------------------------------------------------------


def url_citations(parts: Sequence[TextPart]) -> list[dict[str, JSON]]:
    """The parts' citations as `url_citation` annotations over their texts joined."""
    return [
        {
            "type": "url_citation",
            "url": s.citation.url,
            "title": s.citation.title,
            "start_index": s.start_index,
            "end_index": s.end_index,
        }
        for s in spans(parts)
    ]


def message_item(
    item_id: str,
    text: str,
    status: str = "completed",
    annotations: list[dict[str, JSON]] | None = None,
) -> dict[str, JSON]:
    part = {"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": []}
    content = [part]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content if status == "completed" else [],
    }


def function_call_item(
    item_id: str, part: ToolUsePart, status: str = "completed"
) -> dict[str, JSON]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": part.id,
        "name": part.name,
        "arguments": part.arguments_json if status == "completed" else "",
        "status": status,
    }


def output_items(response: ChatResponse, item_prefix: str) -> list[dict[str, JSON]]:
    """The reply's output items: its text as one message, then one item per tool call; ids
    end in the item's position, as the stream encoder numbers them."""
    out: list[dict[str, JSON]] = []
    texts = [p for p in response.content if isinstance(p, TextPart)]
    text = "".join(p.text for p in texts)
    if text:
        cited = any(p.citations for p in texts)
        notes = url_citations(texts) if cited else None
        out.append(message_item(f"msg_{item_prefix}_0", text, annotations=notes))
    for call in (p for p in response.content if isinstance(p, ToolUsePart)):
        out.append(function_call_item(f"fc_{item_prefix}_{len(out)}", call))
    return out
