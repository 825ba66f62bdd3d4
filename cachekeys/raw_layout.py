"""The layout of a raw Anthropic body, addressed by the body's own locators, so Lantern's cache
markers go back onto the client's JSON (cachekeys/markers.py `apply_to_anthropic`).

Pure. Shares the typed request's blocks (cachekeys/layout.py) where the body has them; lays out
the body's own blocks (server tools, thinking, empty strings) itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace

from adapters.types import JSON
from cachekeys.layout import Level, Locator, PromptBlock, PromptLayout, _as_sent, _digest
from cachekeys.volatile import is_volatile_block


def anthropic_layout(
    body: Mapping[str, JSON], typed: PromptLayout, count: Callable[[PromptBlock], int]
) -> PromptLayout:
    """The layout of a raw Anthropic body, addressed by the body's own locators so a marker can
    be put back: `typed` (the layout of the typed request decoded from `body`) supplies each
    block the body shares with it, tokens included; the body's own blocks (server tools,
    thinking and other blocks the typed request has no part for, empty strings) are counted
    with `count`. Planning reads only levels, roles, markers, markability and tokens."""
    shared = iter(zip(typed.blocks, typed.tokens, strict=True))
    blocks: list[PromptBlock] = []
    tokens: list[int] = []

    num_own = 0

    def add(block: PromptBlock | None, locator: Locator) -> None:
        nonlocal num_own
        if block is None:  # the typed request has this block too
            block, n = next(shared, (None, 0))
            if block is None:
                raise ValueError("the typed layout is not the layout of this body's typed request")
            block = block if block.locator == locator else replace(block, locator=locator)
        else:
            n, num_own = count(block), num_own + 1
        blocks.append(block)
        tokens.append(n)

    for i, tool in enumerate(body.get("tools") or []):
        add(None if "input_schema" in tool else _raw_tool(tool, ("tools", i)), ("tools", i))
    for locator, part, own in _raw_parts(body.get("system"), ("system",), ("text",)):
        text = str(part.get("text", ""))
        add(_raw_text("system", locator, text, _raw_ttl(part)) if own else None, locator)
    for m, message in enumerate(body.get("messages") or []):
        role = str(message.get("role"))
        parts = _raw_parts(message.get("content"), ("messages", m), TYPED_BLOCKS)
        for k, (locator, part, own) in enumerate(parts):
            add(_raw_message_block(locator, role, k == 0, part) if own else None, locator)
    if len(blocks) - num_own != len(typed.blocks):
        raise ValueError("the typed layout is not the layout of this body's typed request")
    return PromptLayout(tuple(blocks), tuple(tokens))


# the blocks a typed request holds
TYPED_BLOCKS = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking")


def _raw_parts(
    content: JSON, head: tuple[str | int, ...], typed: tuple[str, ...]
) -> list[tuple[Locator, Mapping[str, JSON], bool]]:
    """(locator, block, whether the typed request lacks it): a string is one text block (index
    None), which the typed request lacks when empty; a list's blocks of the `typed` kinds have
    a typed part each."""
    if isinstance(content, str):
        return [((*head, None), {"type": "text", "text": content}, not content)]
    return [
        ((*head, k), part, part.get("type", "text") not in typed)
        for k, part in enumerate(content or [])
    ]


def _raw_tool(tool: Mapping[str, JSON], locator: Locator) -> PromptBlock:
    text = _as_sent({k: v for k, v in tool.items() if k != "cache_control"})
    return PromptBlock("tools", locator, text, _digest("tool", text), _raw_ttl(tool))


def _raw_ttl(part: Mapping[str, JSON]) -> str | None:
    marker = part.get("cache_control")
    if not isinstance(marker, Mapping):
        return None
    return str(marker.get("ttl", "5m"))


def _raw_text(level: Level, locator: Locator, text: str, ttl: str | None) -> PromptBlock:
    return PromptBlock(level, locator, text, _digest("system", text), ttl, False, False, bool(text))


def _raw_message_block(
    locator: Locator, role: str, starts: bool, part: Mapping[str, JSON]
) -> PromptBlock:
    kind = str(part.get("type", "text"))
    head = (role, "start" if starts else "next")
    ttl = _raw_ttl(part)
    return replace(_raw_part_block(locator, head, ttl, kind, part), role=role)


def _raw_part_block(
    locator: Locator, head: tuple[str, str], ttl: str | None, kind: str, part: Mapping[str, JSON]
) -> PromptBlock:
    if kind == "text":
        text = str(part.get("text", ""))
        return PromptBlock(
            "messages",
            locator,
            text,
            _digest(*head, "text", text),
            ttl,
            is_volatile=is_volatile_block(text),
            is_markable=bool(text),
        )
    payload = json.dumps(
        {k: v for k, v in part.items() if k != "cache_control"}, ensure_ascii=False, sort_keys=False
    )
    text = (
        str(part.get("thinking") or part.get("text") or "")
        if kind in ("thinking", "redacted_thinking")
        else payload
    )
    markable = kind not in ("thinking", "redacted_thinking")
    return PromptBlock(
        "messages", locator, text, _digest(*head, kind, payload), ttl, is_markable=markable
    )
