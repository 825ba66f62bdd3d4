"""A provider-faithful prompt cache for the fake upstream: exact-prefix matching, TTLs, prices.

Implements `PromptCacheModel` of tests/fakes/upstream.py. Anthropic: entries only at
`cache_control` breakpoints (at most 4), prefix order tools → system → messages, 20-block
look-back, per-model minimum length, 5m/1h TTL refreshed on read. OpenAI: automatic caching of
prompts of 1024+ tokens in 128-token steps, reported as `cached_tokens` only: OpenAI bills no
write premium, and a cached token costs the model's discounted rate (`openai_read_price`).
Entries are shared by every call made with the same API key (as at the real providers, whose
caches are per organisation or workspace): two tenants of a gateway that share one key share
entries unless their prefix bytes differ; `prompt_cache_key` is only a routing hint at OpenAI,
so it partitions nothing here. Each entry remembers the `principal` that wrote it (a label the
test sets, e.g. the tenant whose call is in flight), and each call the principals whose entries
it read, so a read across tenants is detectable. Tokens per block follow
adapters.tokens.TokenCounter, so the split sums to the upstream's prompt_tokens.
Independent of cachekeys on purpose: it is the referee of Lantern's cache edits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from adapters.tokens import IMAGE_TOKENS, TOKENS_PER_MESSAGE, TOKENS_PER_NAME, TokenCounter

TTL_S = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
OPENAI_MIN_TOKENS = 1024
OPENAI_INCREMENT = 128
PRICE_READ = 0.1
PRICE_WRITE = {"5m": 1.25, "1h": 2.0}
# OpenAI's cached-input price as a share of its input price, by model family (pricing page)
OPENAI_READ_PRICES = (("gpt-5", 0.1), ("gpt-4.1", 0.25), ("o3", 0.25), ("o4-mini", 0.25))
OPENAI_READ_PRICE = 0.5  # gpt-4o, o1 and the rest
READ_PREFILL_SHARE = 0.1  # a cached token costs a tenth of a fresh one's prefill time


class CacheMarkerError(ValueError):
    """The request breaks the provider's marker rules (the real API answers 400)."""


@dataclass(frozen=True, slots=True)
class Block:
    digest: bytes  # chained: identifies the whole prefix up to and including this block
    end: int  # cumulative tokens up to and including this block
    ttl: str | None  # cache_control ttl on this block, if marked


@dataclass(slots=True)
class Entry:
    expires_s: float
    tokens: int
    ttl_s: float
    ready_s: float = 0.0  # readable once the call writing it has prefilled it
    principal: str = ""  # who wrote it (PromptCacheFake.principal at the time)


@dataclass(frozen=True, slots=True)
class Accounting:
    """One call as the provider saw it (kept for tests and the bench)."""

    wire: str
    prompt_tokens: int
    uncached: int
    read: int
    write: int
    write_ttl: str | None
    write_1h: int = 0  # of `write`, the tokens written with the 1 h TTL
    api_key: str = ""
    model: str = ""
    stored: int = 0  # the longest prefix this call left cached (OpenAI writes are not billed)
    principal: str = ""  # who made the call (PromptCacheFake.principal at the time)
    read_from: frozenset[str] = frozenset()  # the principals who wrote the entries it read

    def cost(self) -> float:
        """In input-token units. Anthropic: uncached 1, read 0.1, write 1.25 (5m) or 2.0 (1h);
        OpenAI: uncached 1, read the model's cached rate, no writes."""
        if self.wire == "openai":
            return self.uncached + openai_read_price(self.model) * self.read
        five = self.write - self.write_1h
        writes = PRICE_WRITE["5m"] * five + PRICE_WRITE["1h"] * self.write_1h
        return self.uncached + PRICE_READ * self.read + writes

    def is_cross_read(self) -> bool:
        """It read an entry another principal wrote."""
        return bool(self.read_from - {self.principal})


def openai_read_price(model: str) -> float:
    for family, price in OPENAI_READ_PRICES:
        if model.startswith(family):
            return price
    return OPENAI_READ_PRICE


def min_tokens_for(model: str) -> int:
    for family, tokens in (("haiku-4-5", 4096), ("opus-4-5", 4096), ("haiku", 2048)):
        if family in model:
            return tokens
    return 1024


@dataclass
class PromptCacheFake:
    """The provider's cache; `clock` returns seconds and is the only notion of time."""

    clock: Callable[[], float]
    counter: TokenCounter = field(default_factory=TokenCounter)
    openai_ttl_s: float = 1800.0
    entries: dict[bytes, Entry] = field(default_factory=dict)
    calls: list[Accounting] = field(default_factory=list)
    # > 0: a call's first byte comes after its prefill (`prefill_s`), and what it writes is
    # readable only from then on, so calls sent together all miss, as at a provider
    prefill_s_per_token: float = 0.0
    principal: str = ""  # the label of the calls now being made (set by the test)

    def prefill_s(self, fresh: int, read: int) -> float:
        """Time to first byte of a call that prefills `fresh` tokens and reads `read`."""
        return self.prefill_s_per_token * (fresh + READ_PREFILL_SHARE * read)

    def account(
        self, wire: str, body: dict[str, Any], prompt_tokens: int, api_key: str = ""
    ) -> tuple[int, int, int]:
        model = str(body.get("model", ""))
        scope = f"{api_key}\0{model}"
        write_1h, principal = 0, self.principal
        read_from: set[str] = set()
        if wire == "anthropic":
            blocks = anthropic_blocks(body, lambda text: self.counter.count_text(model, text))
            read, write, ttl, write_1h = self._anthropic(scope, model, blocks, read_from)
            stored = read + write
        else:
            blocks = openai_blocks(body, lambda text: self.counter.count_text(model, text))
            read, stored = self._openai(scope, blocks, read_from)
            write, ttl = 0, None
        read, write = min(read, prompt_tokens), min(write, prompt_tokens - min(read, prompt_tokens))
        uncached = prompt_tokens - read - write
        write_1h = min(write_1h, write)
        call = Accounting(
            wire, prompt_tokens, uncached, read, write, ttl, write_1h, api_key, model,
            min(stored, prompt_tokens), principal, frozenset(read_from),
        )  # fmt: skip
        self.calls.append(call)
        return uncached, read, write

    def _alive(self, key: bytes, now: float) -> Entry | None:
        entry = self.entries.get(key)
        if entry is None or entry.expires_s <= now or entry.ready_s > now:
            return None
        return entry

    def _anthropic(
        self, scope: str, model: str, blocks: list[Block], read_from: set[str]
    ) -> tuple[int, int, str | None, int]:
        marked = [i for i, b in enumerate(blocks) if b.ttl is not None]
        _check_markers(blocks, marked)
        now = self.clock()
        hit = -1
        for point in marked:  # each breakpoint looks back up to 20 blocks for a live entry
            for i in range(point, max(point - LOOKBACK_BLOCKS, -1), -1):
                entry = self._alive(_key(scope, blocks[i].digest), now)
                if entry is not None:
                    entry.expires_s = now + entry.ttl_s  # reads refresh the lifetime for free
                    read_from.add(entry.principal)
                    hit = max(hit, i)
                    break
        read = blocks[hit].end if hit >= 0 else 0
        minimum = min_tokens_for(model)
        written = [p for p in marked if p > hit and blocks[p].end >= minimum]
        ready_s = now + self.prefill_s(blocks[-1].end - read if blocks else 0, read)
        for point in written:
            ttl_s = TTL_S[blocks[point].ttl or "5m"]
            self._write(
                _key(scope, blocks[point].digest),
                Entry(now + ttl_s, blocks[point].end, ttl_s, ready_s, self.principal),
            )
        if not written:
            return read, 0, None, 0
        # 1 h markers come first: the writes up to the last of them are billed at the 1 h rate
        end_1h = max((blocks[p].end for p in written if blocks[p].ttl == "1h"), default=read)
        return read, blocks[written[-1]].end - read, blocks[written[-1]].ttl, end_1h - read

    def _openai(self, scope: str, blocks: list[Block], read_from: set[str]) -> tuple[int, int]:
        """(cached tokens read, tokens the prefix now cached holds)."""
        now = self.clock()
        common = 0
        readers: list[str] = []
        for block in blocks:
            entry = self._alive(_key(scope, block.digest), now)
            if entry is None:
                break
            entry.expires_s = now + entry.ttl_s
            common = block.end
            readers.append(entry.principal)
        read = _rounded(common)
        starts = [0, *(b.end for b in blocks)]  # the entries that served the rounded read
        read_from.update(p for i, p in enumerate(readers) if starts[i] < read)
        total = _rounded(blocks[-1].end if blocks else 0)
        ready_s = now + self.prefill_s(total - read, read)
        for block in blocks:
            key = _key(scope, block.digest)
            entry = Entry(now + self.openai_ttl_s, block.end, self.openai_ttl_s, ready_s)
            entry.principal = self.principal
            self._write(key, entry)
        return read, max(total, read)

    def _write(self, key: bytes, entry: Entry) -> None:
        """A call writing an entry another call is still prefilling: readable when that one
        is done."""
        pending = self.entries.get(key)
        if pending is not None and pending.expires_s > self.clock():
            entry.ready_s = min(entry.ready_s, pending.ready_s)
            entry.principal = pending.principal  # the same bytes: still the first writer's
        self.entries[key] = entry


def _check_markers(blocks: list[Block], marked: list[int]) -> None:
    if len(marked) > MAX_BREAKPOINTS:
        raise CacheMarkerError(f"{len(marked)} cache_control blocks; at most {MAX_BREAKPOINTS}")
    unknown = [blocks[i].ttl for i in marked if blocks[i].ttl not in TTL_S]
    if unknown:
        raise CacheMarkerError(f"cache_control ttl must be 5m or 1h, not {unknown[0]!r}")
    ttls = [TTL_S[str(blocks[i].ttl)] for i in marked]
    if any(later > earlier for earlier, later in zip(ttls, ttls[1:], strict=False)):
        raise CacheMarkerError("a longer cache TTL must not follow a shorter one")


def _rounded(tokens: int) -> int:
    if tokens < OPENAI_MIN_TOKENS:
        return 0
    return OPENAI_MIN_TOKENS + (tokens - OPENAI_MIN_TOKENS) // OPENAI_INCREMENT * OPENAI_INCREMENT


def _key(scope: str, digest: bytes) -> bytes:
    return hashlib.sha256(scope.encode() + b"\0" + digest).digest()


class _Chain:
    """Builds chained block digests and cumulative token ends."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self._digest = bytes(32)
        self._end = 0

    def add(self, identity: Any, tokens: int, ttl: str | None) -> None:
        self._digest = hashlib.sha256(self._digest + orjson.dumps(identity)).digest()
        self._end += tokens
        self.blocks.append(Block(self._digest, self._end, ttl))


def _ttl(part: Any) -> str | None:
    marker = part.get("cache_control") if isinstance(part, Mapping) else None
    return str(marker.get("ttl", "5m")) if isinstance(marker, Mapping) else None


def _strip(part: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k != "cache_control"}


def _text_parts(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _identity(part: Mapping[str, Any]) -> list[Any]:
    """What the provider renders of a block. Structural keys are parsed (their order is lost);
    free-form JSON (tool inputs, schemas) is rendered in the order sent, so that order counts."""
    kind = part.get("type", "text")
    if kind == "text":
        return ["text", part.get("text", "")]
    if kind == "tool_use":
        return [
            "tool_use",
            part.get("id"),
            part.get("name"),
            orjson.dumps(part.get("input", {})).decode(),
        ]
    if kind == "tool_result":
        inner = [_identity(p) for p in _text_parts(part.get("content"))]
        return ["tool_result", part.get("tool_use_id"), bool(part.get("is_error")), inner]
    return [kind, orjson.dumps(_strip(part), option=orjson.OPT_SORT_KEYS).decode()]


def _tool_identity(name: Any, description: Any, schema: Any) -> list[Any]:
    return ["tool", name, description, orjson.dumps(schema).decode()]


def _part_tokens(part: Mapping[str, Any], count: Callable[[str], int]) -> int:
    kind = part.get("type", "text")
    if kind == "text":
        return count(str(part.get("text", "")))
    if kind in ("image", "image_url"):
        return IMAGE_TOKENS
    if kind == "tool_use":
        return count(str(part.get("name", ""))) + count(
            orjson.dumps(part.get("input", {})).decode()
        )
    if kind == "tool_result":
        return sum(_part_tokens(p, count) for p in _text_parts(part.get("content")))
    return count(orjson.dumps(_strip(part)).decode())


def anthropic_blocks(body: Mapping[str, Any], count: Callable[[str], int]) -> list[Block]:
    """Blocks in cache order; message and system overheads ride on their first block."""
    chain = _Chain()
    tools = list(body.get("tools") or [])
    schemas = [
        {
            "name": t.get("name"),
            "description": t.get("description", ""),
            "parameters": t.get("input_schema", {}),
        }
        for t in tools
    ]
    whole = count(orjson.dumps(schemas).decode()) if tools else 0
    each = [count(orjson.dumps(s).decode()) for s in schemas]
    for i, tool in enumerate(tools):
        # the upstream counts the tools as one JSON array: its punctuation rides on the last tool
        tokens = each[i] if i < len(tools) - 1 else whole - sum(each[:-1])
        identity = _tool_identity(
            tool.get("name"), tool.get("description", ""), tool.get("input_schema")
        )
        chain.add(identity, tokens, _ttl(tool))
    system = body.get("system")
    for j, part in enumerate(_text_parts(system) if system else []):
        overhead = TOKENS_PER_MESSAGE + count("system") if j == 0 else 0
        chain.add(
            ["system", str(part.get("text", ""))],
            overhead + count(str(part.get("text", ""))),
            _ttl(part),
        )
    for message in body.get("messages") or []:
        role = str(message.get("role"))
        for k, part in enumerate(_text_parts(message.get("content"))):
            overhead = TOKENS_PER_MESSAGE + count(role) if k == 0 else 0
            identity = [role, k == 0, *_identity(part)]
            chain.add(identity, overhead + _part_tokens(part, count), _ttl(part))
    automatic = _ttl(body)  # a request-level marker lands on the last block
    if automatic is not None and chain.blocks and chain.blocks[-1].ttl is None:
        last = chain.blocks[-1]
        chain.blocks[-1] = Block(last.digest, last.end, automatic)
    return chain.blocks


def openai_blocks(body: Mapping[str, Any], count: Callable[[str], int]) -> list[Block]:
    chain = _Chain()
    tools = [t.get("function", t) for t in body.get("tools") or []]
    if tools:
        schemas = [
            {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("parameters", {}),
            }
            for t in tools
        ]
        identity = [_tool_identity(t["name"], t["description"], t["parameters"]) for t in schemas]
        chain.add(identity, count(orjson.dumps(schemas).decode()), None)
    for message in body.get("messages") or []:
        role = str(message.get("role"))
        overhead = TOKENS_PER_MESSAGE + count(role)
        if message.get("name"):
            overhead += TOKENS_PER_NAME + count(str(message["name"]))
        parts = _text_parts(message.get("content"))
        calls = list(message.get("tool_calls") or [])
        if not parts and not calls:
            chain.add([role, True, None], overhead, None)
        for k, part in enumerate(parts):
            tokens = (overhead if k == 0 else 0) + _part_tokens(part, count)
            chain.add([role, k == 0, *_identity(part)], tokens, None)
        for k, call in enumerate(calls):
            function = call.get("function", {})
            tokens = count(str(function.get("name", ""))) + count(
                str(function.get("arguments", ""))
            )
            identity = [
                role,
                "call",
                call.get("id"),
                function.get("name"),
                function.get("arguments"),
            ]
            chain.add(identity, tokens + (overhead if not parts and k == 0 else 0), None)
    return chain.blocks
