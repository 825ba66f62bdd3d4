"""Token counting for canonical requests with tiktoken, fully offline.

Owns the choice of encoding per model and OpenAI's per-message overhead rule; reads the BPE
files that ship inside LiteLLM (never the network). Counts are estimates for non-OpenAI models.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import orjson
import tiktoken

from adapters.types import (
    ChatRequest,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolSpec,
    ToolUsePart,
)

TOKENS_PER_MESSAGE = 3  # <|start|>{role}\n ... <|end|> in OpenAI's chat format
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3  # every reply is primed with <|start|>assistant<|message|>
IMAGE_TOKENS = 85  # OpenAI's base cost of one image tile; images are never decoded here
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")
MEMO_MIN_CHARS = 64  # shorter texts encode about as fast as they hash: counted directly
# Longer texts are encoded every time and never kept: one would hold its own size again in ids,
# and memory a client sent must go back when its call ends (a 28 MiB body kept ~90 MiB).
MEMO_MAX_CHARS = 1 << 20
MEMO_MAX_BYTES = 16 << 20  # ids kept by digest: 4 bytes a token plus each entry's own
ENTRY_BYTES = 160  # an entry's key, array header and dict slot, about (CPython 3.12)
RECENT_MAX_CHARS = 4 << 20  # the texts kept by identity, all together: one long call's blocks
RECENT_TEXTS = 512  # and at most this many of them
MAX_NAMES = 4096  # memoised counts of roles, message names and tool names
MAX_NAME_CHARS = 256  # a longer name (client input) is counted, not memoised
MAX_TOOL_LIST_BYTES = 4 << 20  # memoised counts of whole tool lists, by their JSON bytes
MAX_TOOL_TUPLES = 64  # of those, the tuples of ToolSpecs counted, found by identity
MAX_TUPLE_BYTES = 64 << 10  # only of lists this small (the tuples are kept alive: 4 MB at most)
MIN_CALLER_DIGEST_BYTES = 20  # a caller's digest key is longer than the memo's own (16 bytes)


def bundled_tiktoken_dir() -> Path | None:
    """LiteLLM's folder of tiktoken BPE files, named by sha1 of their download URL."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def use_bundled_tiktoken_files() -> None:
    """Point tiktoken's cache at LiteLLM's bundled files unless the operator chose a folder."""
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        folder = bundled_tiktoken_dir()
        if folder is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


def encoding_name_for(model: str) -> str:
    """o200k_base for the gpt-4o / o-series families, cl100k_base for everything else."""
    bare = model.rsplit("/", 1)[-1].lower()
    return "o200k_base" if bare.startswith(_O200K_PREFIXES) else "cl100k_base"


# Kept: a 30 KB history encodes in ~5.6 ms; `seen` finds a recent string in ~1 µs, no digest.
class TokenIdsMemo:
    """Token ids per (encoding, text digest), an LRU bounded by bytes: an agent re-sends its
    whole history on every call, so a call only tokenises its new text. Keeps digests and ids;
    of the text, only references to the last strings it was given (at most `RECENT_MAX_CHARS`
    together, in memory, never written). Texts over `MEMO_MAX_CHARS` are neither kept nor
    looked up."""

    def __init__(self, max_bytes: int = MEMO_MAX_BYTES) -> None:
        self._entries: OrderedDict[tuple[str, str, bytes], array[int]] = OrderedDict()
        self._num_tokens = 0
        self._max_bytes = max_bytes
        # the last texts looked up, by identity: counting reads the very strings that prefix
        # hashing just read, and a 30 KB history is worth not hashing twice per call
        self._recent: dict[int, tuple[str, str, str, Sequence[int]]] = {}
        self._recent_chars = 0

    def ids(
        self,
        encoding: tiktoken.Encoding,
        text: str,
        digest: bytes | None = None,
        scope: str = "",
    ) -> Sequence[int]:
        """The ids of `text`. `digest`, when given, is the caller's collision-resistant digest
        of something that determines `text` (a prompt block's SHA-256): it keys the entry
        instead of a BLAKE2b of the text, so a 30 KB history is not hashed a second time.
        It must be 20 bytes or more (never the 16 of the memo's own digests). `scope` (the
        tenant) is part of the key: a hit saves milliseconds, so an entry another tenant made
        would tell a caller, by its latency, that someone sent that very text."""
        known = self.seen(encoding, text, scope)
        if known is not None:
            return known
        if digest is not None and len(digest) < MIN_CALLER_DIGEST_BYTES:
            raise ValueError(f"a caller's digest needs {MIN_CALLER_DIGEST_BYTES}+ bytes")
        if len(text) > MEMO_MAX_CHARS:
            return encoding.encode_ordinary(text)
        found = self._lookup(encoding, text, digest, scope)
        self._recent[id(text)] = (text, encoding.name, scope, found)
        self._recent_chars += len(text)
        while len(self._recent) > RECENT_TEXTS or self._recent_chars > RECENT_MAX_CHARS:
            self._recent_chars -= len(self._recent.pop(next(iter(self._recent)))[0])
        return found

    def seen(self, encoding: tiktoken.Encoding, text: str, scope: str = "") -> Sequence[int] | None:
        """The ids of this very string object when it is among the recent texts looked up in
        `scope`, else None: a dict lookup, no hashing and no encoding. (A string object may be
        shared between tenants' calls: the tool texts memo hands out one per tool content.)"""
        recent = self._recent.get(id(text))
        if (
            recent is not None
            and recent[0] is text
            and recent[1] == encoding.name
            and recent[2] == scope
        ):
            return recent[3]
        return None

    def _lookup(
        self, encoding: tiktoken.Encoding, text: str, digest: bytes | None, scope: str
    ) -> Sequence[int]:
        if digest is None:
            digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        key = (encoding.name, scope, digest)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found
        ids = array("I", encoding.encode_ordinary(text))
        self._entries[key] = ids
        self._num_tokens += len(ids)
        while self._entries and self.num_bytes > self._max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._num_tokens -= len(evicted)
        return ids

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    @property
    def num_bytes(self) -> int:
        """What the entries hold: their ids and each entry's own overhead (about)."""
        return 4 * self._num_tokens + ENTRY_BYTES * len(self._entries)

    @property
    def num_recent_chars(self) -> int:
        return self._recent_chars


class TokenCounter:
    """Counts tokens of text and of whole requests; encoders are loaded once per instance.

    With a `memo`, texts of `MEMO_MIN_CHARS` or more are tokenised once and looked up after;
    share one counter between token counting and prefix hashing so each text is encoded once."""

    def __init__(self, memo: TokenIdsMemo | None = None) -> None:
        self._encodings: dict[str, tiktoken.Encoding] = {}
        self.memo = memo
        # token counts of roles and names (a handful of short strings, a tiktoken call each)
        self._names: dict[tuple[str, str, str], int] = {}  # (encoding, scope, name)
        self._tool_lists: dict[tuple[str, str, bytes], int] = {}  # (encoding, scope, JSON)
        self._tool_list_bytes = 0
        # counts of tool tuples by id(tools) -> (tools, encoding, scope, count)
        self._tool_tuples: dict[int, tuple[tuple[ToolSpec, ...], str, str, int]] = {}

    def encoding(self, model: str) -> tiktoken.Encoding:
        name = encoding_name_for(model)
        found = self._encodings.get(name)
        if found is None:
            use_bundled_tiktoken_files()
            found = self._encodings[name] = tiktoken.get_encoding(name)
        return found

    def encode(
        self, model: str, text: str, digest: bytes | None = None, scope: str = ""
    ) -> Sequence[int]:
        """Token ids of `text` (memoised whatever its length when the counter has a memo;
        `digest` and `scope`, the tenant, as in `TokenIdsMemo.ids`)."""
        enc = self.encoding(model)
        if self.memo is None:
            return enc.encode_ordinary(text)
        return self.memo.ids(enc, text, digest, scope)

    def count_text(self, model: str, text: str, scope: str = "") -> int:
        return self._len(self.encoding(model), text, scope)

    def _len(self, enc: tiktoken.Encoding, text: str, scope: str) -> int:
        if self.memo is None:
            return len(enc.encode_ordinary(text))
        if len(text) < MEMO_MIN_CHARS:
            # a short text that prefix hashing just encoded (a call's new user turn, ~20 us
            # of tiktoken with caches cold) is counted from those ids; others are not memoised
            found = self.memo.seen(enc, text, scope)
            return len(found if found is not None else enc.encode_ordinary(text))
        return len(self.memo.ids(enc, text, None, scope))

    # Kept: a hit is ~1 µs against ~3-4 µs to encode, once or twice per message of the history.
    def _name_len(self, enc: tiktoken.Encoding, name: str, scope: str) -> int:
        """`len(enc.encode_ordinary(name))` for a role or a name, memoised (bounded)."""
        if len(name) > MAX_NAME_CHARS:
            return len(enc.encode_ordinary(name))
        key = (enc.name, scope, name)
        found = self._names.get(key)
        if found is None:
            if len(self._names) >= MAX_NAMES:
                self._names.clear()  # a bound, not an LRU: names are few
            found = self._names[key] = len(enc.encode_ordinary(name))
        return found

    def count_request(self, req: ChatRequest, scope: str = "") -> int:
        """Prompt tokens the way OpenAI bills a chat call: per-message overhead, content, tool
        schemas as compact JSON, and the reply priming. `scope`: the tenant, whose memo entries
        alone the count may read (`TokenIdsMemo.ids`)."""
        enc = self.encoding(req.model)
        total = REPLY_PRIMING_TOKENS
        if req.system:
            total += TOKENS_PER_MESSAGE + self._name_len(enc, "system", scope)
            total += sum(self._len(enc, p.text, scope) for p in req.system)
        for msg in req.messages:
            total += self._count_message(enc, msg, scope)
        if req.tools:
            total += self._tools_len(enc, req.tools, scope)
        return total

    # Kept: 12 tools count in ~40 µs with it, ~90 µs without (the ids memo warm).
    def _tools_len(self, enc: tiktoken.Encoding, tools: tuple[ToolSpec, ...], scope: str) -> int:
        """Tokens of the tool schemas as compact JSON, memoised by those JSON bytes (bounded by
        their size): an agent sends the same tools on every call, so the text is not decoded,
        hashed again for the ids memo and looked up there per call. A tuple counted before
        (the door's and the prompt view's tool memos hand out the same read-only tuple for the
        same list) is found by identity, without serialising it."""
        seen = self._tool_tuples.get(id(tools))
        if seen is not None and seen[0] is tools and seen[1] == enc.name and seen[2] == scope:
            return seen[3]
        schemas = [
            {
                "name": t.name,
                "description": t.description,
                "parameters": s if type(s := t.input_schema) is dict else dict(s),
            }
            for t in tools
        ]
        raw = orjson.dumps(schemas)
        if len(raw) > MAX_TOOL_LIST_BYTES:
            return self._len(enc, raw.decode(), scope)
        key = (enc.name, scope, raw)
        found = self._tool_lists.get(key)
        if found is None:
            if self._tool_list_bytes + len(raw) > MAX_TOOL_LIST_BYTES:
                self._tool_lists.clear()  # a bound, not an LRU: an agent's tool lists are few
                self._tool_list_bytes = 0
            found = self._tool_lists[key] = self._len(enc, raw.decode(), scope)
            self._tool_list_bytes += len(raw)
        if len(raw) <= MAX_TUPLE_BYTES:
            if len(self._tool_tuples) >= MAX_TOOL_TUPLES:
                self._tool_tuples.clear()  # a bound, not an LRU: an agent's tool lists are few
            self._tool_tuples[id(tools)] = (tools, enc.name, scope, found)  # its id stays its own
        return found

    def _count_message(self, enc: tiktoken.Encoding, msg: Message, scope: str) -> int:
        total = TOKENS_PER_MESSAGE + self._name_len(enc, msg.role, scope)
        if msg.name is not None:
            total += TOKENS_PER_NAME + self._name_len(enc, msg.name, scope)
        for part in msg.content:
            if isinstance(part, TextPart):
                total += self._len(enc, part.text, scope)
            elif isinstance(part, ImagePart):
                total += IMAGE_TOKENS
            elif isinstance(part, ToolUsePart):
                total += self._name_len(enc, part.name, scope)
                total += self._len(enc, part.arguments_json, scope)
            elif isinstance(part, ThinkingPart):
                total += self._len(enc, part.thinking or part.redacted_data or "", scope)
            elif isinstance(part, ToolResultPart):
                for inner in part.content:
                    total += (
                        self._len(enc, inner.text, scope)
                        if isinstance(inner, TextPart)
                        else IMAGE_TOKENS
                    )
        return total
