"""The flattened prompt: blocks in cache order (tools, system, messages) with digests and counts.

Pure. A block is one tool, one system text block, or one message content block: the unit at
which providers place cache breakpoints. Digests ignore cache markers, so a marker never
changes what a block is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from adapters.types import (
    JSON,
    ChatRequest,
    ContentPart,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolSpec,
    ToolUsePart,
)
from cachekeys.canonical import tool_digest
from cachekeys.normalise import PublicPrefix
from cachekeys.volatile import is_volatile_block

Level = Literal["tools", "system", "messages"]
Locator = tuple[str | int | None, ...]  # ("tools", 2), ("system", 0), ("messages", 3, 1)
TOOL_TEXT_MAX_CHARS = 16_000_000  # tool text held by `ToolTextMemo` (a 32 MiB body fits once)


@dataclass(frozen=True, slots=True)
class PromptBlock:
    level: Level
    locator: Locator
    text: str  # what the token counter reads
    digest: bytes  # identity of the block's content (markers excluded)
    marker_ttl: str | None = None  # a cache marker the client set on this block
    is_public: bool = False  # declared shareable across tenants
    is_volatile: bool = False  # Lantern's relocated trailing block: never part of the stable prefix
    is_markable: bool = True  # providers reject markers on empty text and thinking blocks
    role: str = ""  # the message's role (messages level only)

    @property
    def name(self) -> str:
        match self.locator:  # the usual shapes spelt out: each call names its stable blocks
            case (str(level), int(i)):
                return f"{level}[{i}]"
            case (str(level), int(m), int(k)):
                return f"{level}[{m}][{k}]"
        head, *rest = self.locator
        return str(head) + "".join([f"[{r}]" for r in rest if r is not None])


def _digest(*fields: str) -> bytes:
    return hashlib.sha256("\0".join(fields).encode("utf-8")).digest()


def _as_sent(value: JSON) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def system_digest_hex(text: str) -> str:
    """What an admin writes in `public_prefixes` to declare a system text block public."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- canonical types ---------------------------------------------------------------------


class ToolTextMemo:
    """A tool block's text and digest, memoised by the tool's name, description and the
    identity of its schema object. With canonical JSON on, the schemas are `SchemaMemo`'s shared
    read-only results, the same objects on every call of an agent, so each tool is serialised
    and hashed once. An entry holds its schema, so the identity cannot be reused by another
    object while the entry lives; a fresh schema object (canonical JSON off) is a miss. Keeps
    only what the caller's own tool determines: no salt, nothing tenant-specific. A pure memo:
    bounded by entries and by characters of tool text, not per tenant."""

    def __init__(self, max_entries: int = 4096, max_chars: int = TOOL_TEXT_MAX_CHARS) -> None:
        self._memo: dict[tuple[str, str, int], tuple[Mapping[str, JSON], str, bytes]] = {}
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._num_chars = 0

    def text_and_digest(self, tool: ToolSpec) -> tuple[str, bytes]:
        schema = tool.input_schema
        key = (tool.name, tool.description, id(schema))
        found = self._memo.get(key)
        if found is not None and found[0] is schema:
            return found[1], found[2]
        text, digest = _tool_text_and_digest(tool)
        if len(text) > self._max_chars:
            return text, digest
        if len(self._memo) >= self._max_entries or self._num_chars + len(text) > self._max_chars:
            self._memo.clear()  # a bound, not an LRU, as SchemaMemo
            self._num_chars = 0
        self._memo[key] = (schema, text, digest)
        self._num_chars += len(text)
        return text, digest

    def __len__(self) -> int:
        return len(self._memo)


def _tool_text_and_digest(tool: ToolSpec) -> tuple[str, bytes]:
    # identity as sent (key order included: a provider renders schemas in the order given);
    # the order-free `tool_digest` only decides whether a tool is declared public
    text = _as_sent(
        {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
    )
    return text, _digest("tool", text)


def request_blocks(
    request: ChatRequest,
    public: PublicPrefix = PublicPrefix(),
    tool_texts: ToolTextMemo | None = None,
    known: tuple[Sequence[PromptBlock], int] | None = None,
) -> tuple[PromptBlock, ...]:
    """The request's blocks. `known` = (blocks, n): an earlier call's blocks of this request's
    tools, system and first n messages, equal to this one's (the caller checks, as
    `cachekeys.session_layout` does): only the messages after them are laid out."""
    if known is not None:
        head, first = known
        return _mark_public_run(_message_blocks(request, list(head), first))
    blocks: list[PromptBlock] = []
    for i, tool in enumerate(request.tools):
        text, digest = (
            _tool_text_and_digest(tool) if tool_texts is None else tool_texts.text_and_digest(tool)
        )
        ttl = tool.cache_control.ttl if tool.cache_control else None
        blocks.append(
            PromptBlock(
                "tools",
                ("tools", i),
                text,
                digest,
                ttl,
                public.has_tools and public.is_public_tool(tool.name, tool_digest(tool)),
            )
        )
    for j, part in enumerate(request.system):
        ttl = part.cache_control.ttl if part.cache_control else None
        public_system = public.is_public_system(system_digest_hex(part.text))
        blocks.append(
            PromptBlock(
                "system",
                ("system", j),
                part.text,
                _digest("system", part.text),
                ttl,
                public_system,
                False,
                bool(part.text),
            )
        )
    return _mark_public_run(_message_blocks(request, blocks, 0))


def _message_blocks(
    request: ChatRequest, blocks: list[PromptBlock], first: int
) -> list[PromptBlock]:
    """`blocks` with a block appended for each content part of messages `first` onward."""
    for m in range(first, len(request.messages)):
        message = request.messages[m]
        for k, content_part in enumerate(message.content):
            blocks.append(_part_block(("messages", m, k), message.role, k == 0, content_part))
    return blocks


def _part_block(
    locator: Locator, role: str, starts_message: bool, part: ContentPart
) -> PromptBlock:
    head = (role, "start" if starts_message else "next")
    ttl = part.cache_control.ttl if part.cache_control else None
    if isinstance(part, TextPart):
        return PromptBlock(
            "messages",
            locator,
            part.text,
            _digest(*head, "text", part.text),
            ttl,
            is_volatile=is_volatile_block(part.text),
            is_markable=bool(part.text),
            role=role,
        )
    if isinstance(part, ImagePart):
        source = part.url or f"{part.media_type}:{part.data_b64}"
        return PromptBlock("messages", locator, "", _digest(*head, "image", source), ttl, role=role)
    if isinstance(part, ToolUsePart):
        payload = (part.id, part.name, part.arguments_json)
        return PromptBlock(
            "messages",
            locator,
            part.name + part.arguments_json,
            _digest(*head, "tool_use", *payload),
            ttl,
            role=role,
        )
    if isinstance(part, ThinkingPart):
        payload = (part.thinking, part.signature, part.redacted_data or "")
        digest = _digest(*head, "thinking", *payload)
        # providers refuse a marker on a thinking block
        return PromptBlock(
            "messages", locator, part.thinking, digest, ttl, role=role, is_markable=False
        )
    texts = "".join(p.text for p in part.content if isinstance(p, TextPart))
    images = "".join(p.url or p.data_b64 or "" for p in part.content if isinstance(p, ImagePart))
    fields = ("tool_result", part.tool_use_id, str(part.is_error), texts, images)
    return PromptBlock("messages", locator, texts, _digest(*head, *fields), ttl, role=role)


def _mark_public_run(blocks: list[PromptBlock]) -> tuple[PromptBlock, ...]:
    """Only the leading run of declared-public blocks is public: sharing stops at the first
    private block, because every later block's key depends on it."""
    if True not in [block.is_public for block in blocks]:
        return tuple(blocks)  # the usual case: nothing declared public
    out: list[PromptBlock] = []
    in_run = True
    for block in blocks:
        in_run = in_run and block.is_public
        out.append(block if in_run or not block.is_public else _private(block))
    return tuple(out)


def _private(block: PromptBlock) -> PromptBlock:
    return replace(block, is_public=False)


# --- raw Anthropic bodies (markers go back onto the client's JSON) ----------------------------------------------------------------------


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


# --- counted layout ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptLayout:
    """Blocks with their token counts; positions are cumulative token ends."""

    blocks: tuple[PromptBlock, ...]
    tokens: tuple[int, ...]

    @classmethod
    def count(
        cls, blocks: Sequence[PromptBlock], count_tokens: Callable[[str], int]
    ) -> PromptLayout:
        return cls(tuple(blocks), tuple(count_tokens(b.text) for b in blocks))

    def end(self, index: int) -> int:
        """Tokens from the start of the prompt to the end of block `index` (-1: 0)."""
        return sum(self.tokens[: index + 1])

    def last_stable(self) -> int:
        """Index of the last block before Lantern's volatile tail (-1 if none)."""
        for i in range(len(self.blocks) - 1, -1, -1):
            if not self.blocks[i].is_volatile:
                return i
        return -1

    def stable_tokens(self) -> int:
        return self.end(self.last_stable())

    def public_tokens(self) -> int:
        n = 0
        for block, tokens in zip(self.blocks, self.tokens, strict=True):
            if not block.is_public:
                break
            n += tokens
        return n

    def public_head(self) -> tuple[int, int]:
        """(tools, system text blocks) in the leading run of declared-public blocks."""
        counts = {"tools": 0, "system": 0}
        for block in self.blocks:
            if not block.is_public or block.level not in counts:
                break
            counts[block.level] += 1
        return counts["tools"], counts["system"]

    def last_of(self, level: Level) -> int:
        indices = [i for i, b in enumerate(self.blocks) if b.level == level]
        return indices[-1] if indices else -1
