"""A call's prompt and reply as the GenAI conventions' opt-in attributes (JSON text in the
schemas of `gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`).

Built only for a traced call of a tenant whose policy opts in (`tracing.record_content`);
inline image bytes are never copied, a part names its media type instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from adapters.types import (
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)


@dataclass(frozen=True, slots=True)
class Content:
    """JSON text of each attribute; `system` None when the request has no system prompt."""

    input_messages: str
    output_messages: str
    system: str | None = None


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url is not None:
        return {"type": "uri", "modality": "image", "uri": part.url}
    return {"type": "image", "mime_type": part.media_type}


def _arguments(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # a model's broken JSON: as it produced it
        return text


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    if isinstance(part, ToolUsePart):
        arguments = _arguments(part.arguments_json)
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": arguments}
    if isinstance(part, ToolResultPart):
        text = "".join(p.text for p in part.content if isinstance(p, TextPart))
        return {"type": "tool_call_response", "id": part.tool_use_id, "response": text}
    if isinstance(part, ThinkingPart):
        return {"type": "reasoning", "content": part.thinking}
    return _image(part)


def _message(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "parts": [_part(p) for p in message.content]}
    if message.name:
        out["name"] = message.name
    return out


def call_content(request: ChatRequest, answer: Message, finish_reason: str | None) -> Content:
    """The request's messages and system prompt, and the answer that ended the call."""
    output = {**_message(answer), "finish_reason": finish_reason or ""}
    system = [_part(p) for p in request.system]
    return Content(
        orjson.dumps([_message(m) for m in request.messages]).decode(),
        orjson.dumps([output]).decode(),
        orjson.dumps(system).decode() if system else None,
    )
