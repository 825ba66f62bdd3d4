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

from adapters.records import slot_init
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


@slot_init
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
        loc = self.locator  # the usual shapes spelt out: each call names its stable blocks
        size = len(loc)
        if size == 2 and loc[1] is not None:
            return f"{loc[0]}[{loc[1]}]"
        if size == 3 and loc[1] is not None and loc[2] is not None:
            return f"{loc[0]}[{loc[1]}][{loc[2]}]"
        head, *rest = loc
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


# --- counted layout ----------------------------------------------------------------------------


@slot_init
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
