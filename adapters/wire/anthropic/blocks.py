"""Anthropic content blocks (text, image, tool_use, tool_result, thinking) <-> canonical parts.

Shared by request and response codecs. Block types the canonical model cannot hold (documents,
server tools) decode to None; they survive only on the same-wire raw-body path. Thinking blocks
keep every byte of their text and signature (the provider checks them on the next turn).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from adapters.errors import WireFormatError
from adapters.types import (
    Citation,
    ContentPart,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)
from adapters.wire.json_fields import cache_control_at, expect, with_cache_control

SKIPPED_BLOCKS = frozenset(
    {
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "container_upload",
    }
)


def _image(block: Mapping[str, Any], path: str) -> ImagePart:
    source = expect(block.get("source"), dict, f"{path}.source")
    cc = cache_control_at(block, path)
    if source.get("type") == "url":
        return ImagePart(url=expect(source.get("url"), str, f"{path}.source.url"), cache_control=cc)
    return ImagePart(
        media_type=expect(source.get("media_type"), str, f"{path}.source.media_type"),
        data_b64=expect(source.get("data"), str, f"{path}.source.data"),
        cache_control=cc,
    )


def decode_simple_blocks(value: Any, path: str) -> tuple[TextPart | ImagePart, ...]:
    """Text and image blocks (system, tool_result content)."""
    if isinstance(value, str):
        return (TextPart(value),) if value else ()
    parts: list[TextPart | ImagePart] = []
    for i, block in enumerate(expect(value, list, path)):
        p = f"{path}[{i}]"
        kind = expect(expect(block, dict, p).get("type"), str, f"{p}.type")
        if kind == "text":
            parts.append(
                TextPart(expect(block.get("text"), str, f"{p}.text"), cache_control_at(block, p))
            )
        elif kind == "image":
            parts.append(_image(block, p))
        elif kind not in SKIPPED_BLOCKS:
            raise WireFormatError(f"{p}.type", f"unsupported block type {kind!r}")
    return tuple(parts)


def decode_block(block: Any, path: str) -> ContentPart | None:
    kind = expect(expect(block, dict, path).get("type"), str, f"{path}.type")
    if kind == "text":
        return TextPart(
            expect(block.get("text"), str, f"{path}.text"), cache_control_at(block, path)
        )
    if kind == "image":
        return _image(block, path)
    if kind == "tool_use":
        arguments = expect(block.get("input", {}), dict, f"{path}.input")
        return ToolUsePart(
            id=expect(block.get("id"), str, f"{path}.id"),
            name=expect(block.get("name"), str, f"{path}.name"),
            arguments_json=orjson.dumps(arguments).decode(),
            cache_control=cache_control_at(block, path),
        )
    if kind == "tool_result":
        return ToolResultPart(
            tool_use_id=expect(block.get("tool_use_id"), str, f"{path}.tool_use_id"),
            content=decode_simple_blocks(block.get("content", ""), f"{path}.content"),
            is_error=bool(block.get("is_error", False)),
            cache_control=cache_control_at(block, path),
        )
    if kind in ("thinking", "redacted_thinking"):
        return _thinking(block, kind, path)
    if kind in SKIPPED_BLOCKS:
        return None
    raise WireFormatError(f"{path}.type", f"unsupported block type {kind!r}")


def _thinking(block: Mapping[str, Any], kind: str, path: str) -> ThinkingPart:
    cc = cache_control_at(block, path)
    if kind == "redacted_thinking":
        data = expect(block.get("data"), str, f"{path}.data")
        return ThinkingPart(redacted_data=data, cache_control=cc)
    return ThinkingPart(
        thinking=expect(block.get("thinking", ""), str, f"{path}.thinking"),
        signature=expect(block.get("signature", ""), str, f"{path}.signature"),
        cache_control=cc,
    )


def decode_citation(value: Any) -> Citation | None:
    """A `web_search_result_location` citation -> canonical; None for the kinds that point into
    documents the client sent (char, page, content-block and search-result locations), which
    carry no URL, and for one not shaped as documented."""
    if not isinstance(value, dict) or value.get("type") != "web_search_result_location":
        return None
    url, title = value.get("url"), value.get("title") or ""
    cited, index = value.get("cited_text") or "", value.get("encrypted_index")
    if not all(isinstance(v, str) for v in (title, cited)):
        return None
    if not isinstance(url, str) or not isinstance(index, str):
        return None
    return Citation(url, title, cited_text=cited, encrypted_index=index)


def decode_citations(values: Any) -> tuple[Citation, ...]:
    if not isinstance(values, list):
        return ()
    return tuple(c for c in map(decode_citation, values) if c is not None)


def encode_citation(c: Citation) -> dict[str, Any] | None:
    """Anthropic's shape needs the provider's `encrypted_index`: a citation without one (from
    another provider) has no faithful Anthropic form."""
    if c.encrypted_index is None:
        return None
    return {
        "type": "web_search_result_location",
        "url": c.url,
        "title": c.title,
        "encrypted_index": c.encrypted_index,
        "cited_text": c.cited_text,
    }


def _encode_text(part: TextPart) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": part.text}
    if part.citations:
        found = [e for e in map(encode_citation, part.citations) if e is not None]
        if found:
            block["citations"] = found
    return with_cache_control(block, part.cache_control)


def _encode_thinking(part: ThinkingPart) -> dict[str, Any]:
    if part.redacted_data is not None:
        block = {"type": "redacted_thinking", "data": part.redacted_data}
    else:
        block = {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
    return with_cache_control(block, part.cache_control)


def encode_block(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, ThinkingPart):
        return _encode_thinking(part)
    if isinstance(part, TextPart):
        return _encode_text(part)
    if isinstance(part, ImagePart):
        source = (
            {"type": "url", "url": part.url}
            if part.url is not None
            else {"type": "base64", "media_type": part.media_type, "data": part.data_b64}
        )
        return with_cache_control({"type": "image", "source": source}, part.cache_control)
    if isinstance(part, ToolUsePart):
        return with_cache_control(
            {
                "type": "tool_use",
                "id": part.id,
                "name": part.name,
                "input": orjson.loads(part.arguments_json or "{}"),
            },
            part.cache_control,
        )
    out: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": part.tool_use_id,
        "content": [encode_block(p) for p in part.content],
    }
    if part.is_error:
        out["is_error"] = True
    return with_cache_control(out, part.cache_control)
