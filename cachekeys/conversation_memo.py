"""The conversation memo: what the prompt path keeps between one call of a conversation and the
next, as one object (the per-conversation layouts, the prefix-hash chain segments, the shared
canonical schemas and tool blocks they are keyed by). Pure data structures; no I/O.

Why it exists: an agent re-sends its whole conversation on every call; on a ~30 KB agent prompt
a follow-up call takes ~2-3 ms with it and ~14 ms without it (OpenAI wire, scratch timeit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cachekeys.canonical import SchemaMemo
from cachekeys.chain_memo import PrefixHashMemo
from cachekeys.layout import ToolTextMemo
from cachekeys.session_layout import SessionLayoutMemo


@dataclass(frozen=True, slots=True)
class ConversationMemo:
    """The layers, each bounded on its own: `layouts` holds each conversation's previous call
    (blocks, token ids, chain states) and is what a follow-up call reuses; `schemas` makes a
    tool's canonical schema the same object on every call, which `layouts` and `tool_texts`
    match by identity; `tool_texts` lays out a known tool without serialising it again (the
    first call of each new conversation of an agent); `hashes` extends the answer's chain
    and shares hashed prefixes between conversations."""

    layouts: SessionLayoutMemo = field(default_factory=SessionLayoutMemo)
    hashes: PrefixHashMemo = field(default_factory=PrefixHashMemo)
    schemas: SchemaMemo = field(default_factory=SchemaMemo)
    tool_texts: ToolTextMemo = field(default_factory=ToolTextMemo)
