"""Canonical request → Converse keyword arguments, with `cachePoint` blocks placed.

Pure encoding: no boto3, no I/O.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from adapters.errors import ProviderRejected
from adapters.types import (
    JSON,
    CacheControl,
    ChatRequest,
    ContentPart,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolUsePart,
)
from adapters.wire.json_fields import json_schema_of

MAX_CACHE_POINTS = 4
_METADATA_VALUE = re.compile(r"[a-zA-Z0-9\s:_@$#=/+,\-.]{0,256}")


def _cache_point(cc: CacheControl) -> dict[str, Any]:
    point: dict[str, Any] = {"type": "default"}
    if cc.ttl == "1h":
        point["ttl"] = "1h"
    return {"cachePoint": point}


def _image(backend: str, part: ImagePart) -> dict[str, Any]:
    if part.data_b64 is None or part.media_type is None:
        raise ProviderRejected(backend, "Bedrock Converse takes images as bytes, not URLs")
    fmt = part.media_type.split("/")[-1].replace("jpg", "jpeg")
    return {"image": {"format": fmt, "source": {"bytes": base64.b64decode(part.data_b64)}}}


def _reasoning(part: ThinkingPart) -> dict[str, Any]:
    """Anthropic thinking as Converse `reasoningContent`: a redacted block's opaque data
    travels as the bytes it encodes (Converse's `redactedContent`)."""
    if part.redacted_data is not None:
        return {"reasoningContent": {"redactedContent": base64.b64decode(part.redacted_data)}}
    text = {"text": part.thinking, "signature": part.signature}
    return {"reasoningContent": {"reasoningText": text}}


def _block(backend: str, part: ContentPart) -> dict[str, Any] | None:
    if isinstance(part, ThinkingPart):
        return _reasoning(part)
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return _image(backend, part)
    if isinstance(part, ToolUsePart):
        args = json.loads(part.arguments_json) if part.arguments_json.strip() else {}
        return {"toolUse": {"toolUseId": part.id, "name": part.name, "input": args}}
    content = [_block(backend, c) for c in part.content]
    return {
        "toolResult": {
            "toolUseId": part.tool_use_id,
            "content": [c for c in content if c is not None] or [{"text": ""}],
            "status": "error" if part.is_error else "success",
        }
    }


class _Points:
    """Places cache points: the client's own markers, else tools, system and the last turn."""

    def __init__(self, enabled: bool, request: ChatRequest) -> None:
        self.enabled = enabled
        self.left = MAX_CACHE_POINTS
        parts = [*request.system, *request.tools, *(p for m in request.messages for p in m.content)]
        self.auto = enabled and not any(p.cache_control is not None for p in parts)

    def after(self, out: list[dict[str, Any]], cc: CacheControl | None) -> None:
        if self.enabled and cc is not None and self.left > 0 and out:
            out.append(_cache_point(cc))
            self.left -= 1


def _messages(backend: str, request: ChatRequest, points: _Points) -> list[dict[str, Any]]:
    """Converse wants alternating user/assistant turns; tool results ride in user turns."""
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            block = _block(backend, part)
            if block is not None:
                blocks.append(block)
                points.after(blocks, part.cache_control)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if points.auto and out:
        points.after(out[-1]["content"], CacheControl())
    return out


def _tool_choice(choice: JSON) -> dict[str, Any] | None:
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind in ("auto", None):
        return {"auto": {}}
    if kind in ("any", "required"):
        return {"any": {}}
    if kind == "tool" and isinstance(choice, dict):
        return {"tool": {"name": choice["name"]}}
    if kind == "function" and isinstance(choice, dict):
        return {"tool": {"name": choice["function"]["name"]}}
    return None  # "none": Converse has no such choice; the tools stay declared


def encode_converse(
    backend: str,
    model_id: str,
    request: ChatRequest,
    cache_points: bool,
    betas: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The keyword arguments of `client.converse` / `client.converse_stream`."""
    points = _Points(cache_points, request)
    kwargs: dict[str, Any] = {"modelId": model_id}
    if request.tools:
        tools: list[dict[str, Any]] = []
        for t in request.tools:
            spec = {"name": t.name, "inputSchema": {"json": dict(t.input_schema)}}
            if t.description:
                spec["description"] = t.description
            tools.append({"toolSpec": spec})
            points.after(tools, t.cache_control)
        if points.auto:
            points.after(tools, CacheControl())
        config: dict[str, Any] = {"tools": tools}
        choice = _tool_choice(request.tool_choice)
        if choice is not None and request.tool_choice is not None:
            config["toolChoice"] = choice
        kwargs["toolConfig"] = config
    system: list[dict[str, Any]] = []
    for part in request.system:
        if part.text:
            system.append({"text": part.text})
            points.after(system, part.cache_control)
    if points.auto:
        points.after(system, CacheControl())
    if system:
        kwargs["system"] = system
    kwargs["messages"] = _messages(backend, request, points)
    inference: dict[str, Any] = {}
    for key, value in (
        ("maxTokens", request.max_tokens),
        ("temperature", request.temperature),
        ("topP", request.top_p),
    ):
        if value is not None:
            inference[key] = value
    if request.stop:
        inference["stopSequences"] = list(request.stop)
    if inference:
        kwargs["inferenceConfig"] = inference
    output = _output_config(request.extra.get("response_format"))
    if output is not None:
        kwargs["outputConfig"] = output
    additional = _additional_fields(request, betas)
    if additional:
        kwargs["additionalModelRequestFields"] = additional
    if request.user is not None:
        kwargs["requestMetadata"] = {"user_id": _metadata_value(backend, request.user)}
    return kwargs


def _output_config(response_format: Any) -> dict[str, Any] | None:
    """A JSON schema response format (OpenAI's, or Anthropic's `output_config.format` made
    one) as Converse's structured outputs: `outputConfig.textFormat`, the schema as a string."""
    schema = json_schema_of(response_format)
    if schema is None:
        return None
    name = response_format["json_schema"].get("name")
    definition = {"schema": json.dumps(schema), "name": name if isinstance(name, str) else "output"}
    return {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}}


def _metadata_value(backend: str, user: str) -> str:
    """The client's end-user id (OpenAI `user`, Anthropic `metadata.user_id`) as a value of
    Converse's `requestMetadata` (it filters Bedrock's invocation logs), whose form is narrow."""
    if not _METADATA_VALUE.fullmatch(user):
        raise ProviderRejected(
            backend,
            "user (metadata.user_id): Bedrock's requestMetadata takes up to 256 characters of "
            "letters, digits, whitespace and :_@$#=/+,-.",
        )
    return user


def _additional_fields(request: ChatRequest, betas: tuple[str, ...]) -> dict[str, Any]:
    """Claude's own fields that Converse has no slot for: `thinking`, `top_k`, betas."""
    out: dict[str, Any] = {k: request.extra[k] for k in ("thinking", "top_k") if k in request.extra}
    if betas:
        out["anthropic_beta"] = list(betas)
    return out
