"""The previous call's layout per conversation, so a call that re-sends it lays out only its tail.

An agent re-sends its whole history on every call and appends a turn or two. This memo keeps,
per (tenant, conversation) key, the last call's canonical request parts, blocks, token ids and
prefix-hash chain states. A new call whose tools and system equal the entry's, and whose first n
messages equal the entry's first n, takes those blocks, ids and chain states as they are: only
the messages after them are laid out, tokenised and hashed. Equality is exact (`==` on frozen
dataclasses of strings, the schema object itself for a tool: `SchemaMemo` shares them), so the
result is the same as laying the whole prompt out (tested against random agent histories).

Holds the previous call's request parts (prompt text) in process memory only, bounded by a
count of entries and of characters (LRU); never written out. Keys start with the tenant id and
an entry also records the salt it was hashed under, so one tenant never reads another's entry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter

from adapters.records import evolve, slot_init
from adapters.types import ChatRequest, Message, TextPart, ToolSpec
from cachekeys.chain_memo import ChainState
from cachekeys.layout import PromptBlock

MAX_ENTRIES = 4096
MAX_CHARS = 32_000_000  # prompt characters held across all entries
# A larger prompt is not kept: its entry (text, token ids, chain) would hold ~10 bytes a
# character after its call, and memory a client sent must go back when the call ends.
MAX_ENTRY_CHARS = 4_000_000
# a block's text, a message's content (read per block and message of every call: `map` calls no
# Python code)
_TEXT, _CONTENT = attrgetter("text"), attrgetter("content")

LayoutKey = tuple[str, str, str, int]
Chain = tuple[int, tuple[bytes, ...], tuple[ChainState, ...]]


@slot_init
@dataclass(frozen=True, slots=True)
class LayoutEntry:
    """One call's layout, as the next call of its conversation may reuse it."""

    options: object  # the normalise options object the call was laid out under (identity)
    salt: str
    model: str
    tools: tuple[ToolSpec, ...]
    system: tuple[TextPart, ...]
    messages: tuple[Message, ...]
    blocks: tuple[PromptBlock, ...]
    block_ids: tuple[Sequence[int], ...]
    message_ends: tuple[int, ...]  # blocks before message m (m = 0 .. len(messages))
    public_tokens: int
    hashes: tuple[bytes, ...]
    states: tuple[ChainState, ...]  # the hash chain after each stable block
    chars: int
    cache_key: str = ""  # its prompt_cache_key ("": not kept), made with `client_key`
    client_key: str | None = None
    root: str = ""  # its session root ("": not kept)

    @classmethod
    def of(
        cls,
        options: object,
        salt: str,
        request: ChatRequest,
        blocks: tuple[PromptBlock, ...],
        block_ids: tuple[Sequence[int], ...],
        chain: Chain,
        cache_key: str = "",
        root: str = "",
    ) -> LayoutEntry:
        """`chain`: the public tokens the hashes were keyed with, the hashes, and the chain's
        state after each stable block (`PrefixHashMemo.walk`)."""
        public_tokens, hashes, states = chain
        head = len(request.tools) + len(request.system)
        ends = tuple(accumulate(map(len, map(_CONTENT, request.messages)), initial=head))
        if ends[-1] != len(blocks):
            raise ValueError(f"{len(blocks)} blocks for a request of {ends[-1]} parts")
        chars = sum(map(len, map(_TEXT, blocks)))
        return cls(
            options,
            salt,
            request.model,
            request.tools,
            request.system,
            request.messages,
            blocks,
            block_ids,
            ends,
            public_tokens,
            hashes,
            states,
            chars,
            cache_key,
            request.prompt_cache_key,
            root,
        )


@slot_init
@dataclass(frozen=True, slots=True)
class LayoutMatch:
    """How much of an entry a new call shares: its tools, system and first `messages` messages."""

    entry: LayoutEntry
    messages: int

    @property
    def num_blocks(self) -> int:
        return self.entry.message_ends[self.messages]

    def known(self) -> tuple[tuple[PromptBlock, ...], int]:
        """`request_blocks`' `known` argument."""
        return self.entry.blocks[: self.num_blocks], self.messages

    def chain(self, public_tokens: int) -> tuple[tuple[bytes, ...], tuple[ChainState, ...]] | None:
        """`PrefixHashMemo.walk`'s `resume` argument, when the chain can resume: the same public
        tokens (they decide which hashes are salted), and only blocks that were hashed."""
        entry = self.entry
        if public_tokens != entry.public_tokens:
            return None
        states = entry.states[: min(self.num_blocks, len(entry.states))]
        return (entry.hashes, states) if states else None

    def shared(self, request: ChatRequest) -> ChatRequest:
        """`request` with its system and first `messages` messages replaced by the entry's own
        (equal) objects: the history an agent re-sends is then the very strings the previous
        call's token counting looked up, which the token-ids memo knows by identity."""
        fields = self.shared_fields(request.messages)
        return evolve(request, **fields) if fields else request

    def shared_fields(self, messages: tuple[Message, ...]) -> dict[str, object]:
        """What `shared` changes in a request whose messages are `messages`."""
        entry, n = self.entry, self.messages
        if n == 0:
            return {}
        return {"system": entry.system, "messages": entry.messages[:n] + messages[n:]}

    def cache_key(self, client_key: str | None) -> str | None:
        """The entry's `prompt_cache_key` when it holds for the new call: it depends on the
        stable tools and system blocks (the same), the salt (the same) and the client's key."""
        entry = self.entry
        return entry.cache_key if entry.cache_key and entry.client_key == client_key else None

    def root(self) -> str | None:
        """The entry's session root when the first message is shared too (the root is the
        tools, system and first message)."""
        return self.entry.root if self.entry.root and self.messages >= 1 else None


def _same_tools(a: tuple[ToolSpec, ...], b: tuple[ToolSpec, ...]) -> bool:
    # the schema by identity: `==` on JSON would take 1, 1.0 and true for one value
    return len(a) == len(b) and all(
        x.name == y.name
        and x.description == y.description
        and x.input_schema is y.input_schema
        and x.cache_control == y.cache_control
        for x, y in zip(a, b, strict=True)
    )


class SessionLayoutMemo:
    """Bounded LRU of `LayoutEntry`, one per (tenant, conversation) key. A pure memo (a lost
    entry costs laying the prompt out again, to the same result): bounded by entries and
    characters, not per tenant."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_chars: int = MAX_CHARS) -> None:
        self._entries: OrderedDict[LayoutKey, LayoutEntry] = OrderedDict()
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._chars = 0
        self.hits = 0  # calls that reused an entry
        self.reused_blocks = 0  # blocks those calls took from their entries

    @staticmethod
    def key(tenant: str, wire: str, request: ChatRequest) -> LayoutKey:
        """The client's session id when it sends one; else the first message's length tells the
        conversations of one tenant apart cheaply (a clash only costs a miss)."""
        return SessionLayoutMemo.key_of(tenant, wire, request.session_id, request.messages)

    @staticmethod
    def key_of(
        tenant: str, wire: str, session_id: str | None, messages: tuple[Message, ...]
    ) -> LayoutKey:
        """`key` of a request with this session id and these messages."""
        first = messages[0].content if messages else ()
        size = sum(len(p.text) for p in first if isinstance(p, TextPart))
        return tenant, wire, session_id or "", size

    def match(
        self, key: LayoutKey, request: ChatRequest, options: object, salt: str
    ) -> LayoutMatch | None:
        """The entry for `key` if `request` (normalised under `options`) shares its tools and
        system, and how many leading messages it shares."""
        parts = (request.model, request.tools, request.system, request.messages)
        return self.match_parts(key, parts, options, salt)

    def match_parts(
        self,
        key: LayoutKey,
        parts: tuple[str, tuple[ToolSpec, ...], tuple[TextPart, ...], tuple[Message, ...]],
        options: object,
        salt: str,
    ) -> LayoutMatch | None:
        """`match` of a request with these (model, tools, system, messages), before the request
        is made (its maker then shares the entry's objects in the same copy)."""
        model, tools, system, messages = parts
        entry = self._entries.get(key)
        if (
            entry is None
            or entry.options is not options
            or entry.salt != salt
            or entry.model != model
            or (entry.system is not system and entry.system != system)
            # the same tuple when the decoded tool list came from the tool-list memo
            or (entry.tools is not tools and not _same_tools(entry.tools, tools))
        ):
            return None
        n = 0
        for old, new in zip(entry.messages, messages, strict=False):
            if old is not new and old != new:
                break
            n += 1
        found = LayoutMatch(entry, n)
        self.hits += 1
        self.reused_blocks += found.num_blocks
        return found

    def remember(self, key: LayoutKey, entry: LayoutEntry) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._chars -= old.chars
        if entry.chars > min(self._max_chars, MAX_ENTRY_CHARS):
            return
        self._entries[key] = entry
        self._chars += entry.chars
        while len(self._entries) > self._max_entries or self._chars > self._max_chars:
            _, evicted = self._entries.popitem(last=False)
            self._chars -= evicted.chars

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_chars(self) -> int:
        return self._chars
