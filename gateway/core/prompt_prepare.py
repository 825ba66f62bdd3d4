"""Preparing one call's prompt: policy → cachekeys options, normalise, isolate, mark, key, hash.

Pure apart from the token encoder; all prompt logic lives in cachekeys. Must not keep sessions
or metrics (gateway/core/cache_diagnosis.py) nor hold the port's memos (gateway/core/prompt_cache.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.types import (
    JSON,
    ChatRequest,
    WireFormat,
)
from cachekeys.blockhash import tenant_salt
from cachekeys.canonical import SchemaMemo
from cachekeys.chain_memo import PrefixHashMemo
from cachekeys.diagnosis import (
    CacheMode,
    PromptFingerprint,
    options_digest,
)
from cachekeys.isolation import isolate_raw, isolate_request, scope_line
from cachekeys.keys import prefix_hashes, prompt_cache_key, session_root
from cachekeys.layout import PromptLayout, ToolTextMemo, anthropic_blocks, request_blocks
from cachekeys.markers import apply_to_anthropic, apply_to_request, min_cacheable_tokens
from cachekeys.normalise import NormaliseOptions, PublicPrefix, normalise_request
from cachekeys.planner import Advice, Steering, default_advice, plan_markers
from cachekeys.raw import normalise_raw
from cachekeys.session_layout import LayoutEntry, LayoutMatch, SessionLayoutMemo
from cachekeys.volatile import VolatileMatcher
from gateway.core.ports import PreparedPrompt
from policies.cache import CachePolicy

TTL_S = {"5m": 300.0, "1h": 3600.0}
# The cache autopilot's hook: (layout, salt, the conversation's known root) -> its steering
Steer = Callable[[PromptLayout, str, str | None], Steering]


class Encoder(Protocol):
    """Token ids of a text for a model (adapters.tokens.TokenCounter fits via `TiktokenEncoder`).
    `digest`, when given, determines the text (a prompt block's digest): a memo may key on it."""

    def encode(self, model: str, text: str, digest: bytes | None = None) -> Sequence[int]: ...


class TiktokenEncoder:
    """tiktoken ids, memoised per block text: an agent re-sends its history on every call, so
    only the new blocks of a call are tokenised. Pass the gateway's shared `counter` so token
    counting reads the same memo (each text is encoded once per process, not once per use)."""

    def __init__(
        self, max_cached_tokens: int = 4_000_000, counter: TokenCounter | None = None
    ) -> None:
        counter = counter or TokenCounter(TokenIdsMemo(max_cached_tokens))
        if counter.memo is None:
            raise ValueError("TiktokenEncoder needs a TokenCounter with a memo")
        self._counter = counter
        self._memo = counter.memo

    def encode(self, model: str, text: str, digest: bytes | None = None) -> Sequence[int]:
        return self._memo.ids(self._counter.encoding(model), text, digest)

    @property
    def num_cached_tokens(self) -> int:
        return self._memo.num_tokens


def normalise_options(
    policy: CachePolicy,
    matchers: dict[tuple[str, ...], VolatileMatcher] | None = None,
    schemas: SchemaMemo | None = None,
) -> NormaliseOptions:
    """The tenant's `cache:` section as cachekeys options (compiled patterns memoised in `matchers`)."""
    n = policy.normalise
    key = (str(n.default_patterns), *n.volatile_patterns)
    matcher = (matchers or {}).get(key) or VolatileMatcher.build(
        n.volatile_patterns, n.default_patterns
    )
    if matchers is not None:
        matchers[key] = matcher
    public = PublicPrefix(
        tool_names=frozenset(p.tool for p in policy.public_prefixes if p.tool),
        tool_sha256=frozenset(p.tool_sha256 for p in policy.public_prefixes if p.tool_sha256),
        system_sha256=frozenset(p.system_sha256 for p in policy.public_prefixes if p.system_sha256),
    )
    return NormaliseOptions(
        n.order_tools,
        n.canonical_json,
        n.canonical_tool_args,
        n.relocate_volatile,
        matcher,
        public,
        schemas,
    )


def salt_for(
    policy: CachePolicy,
    secret: bytes,
    tenant_id: str,
    hmac: Callable[[bytes, str], str] = tenant_salt,
) -> str:
    """The tenant's cache salt: none under a shared scope, else `hmac(secret, tenant_id)`
    (`tenant_salt`, or a memo of it)."""
    return "" if policy.scope == "shared" else hmac(secret, tenant_id)


@dataclass(frozen=True, slots=True)
class PromptFacts:
    """What `prepare` learnt that `observe` and `answer_hashes` need (travels in
    PreparedPrompt.diagnosis): the layout's blocks and token ids, so extending the chain with
    the answer hashes only the answer's blocks."""

    tenant: str
    fingerprint: PromptFingerprint
    prompt_cache_key: str
    layout: PromptLayout | None = None
    block_ids: tuple[Sequence[int], ...] = ()
    steering: Steering | None = None  # the autopilot's decision, when it steered this call


def prepare(
    wire: WireFormat,
    body: Mapping[str, JSON],
    request: ChatRequest,
    policy: CachePolicy,
    tenant_id: str,
    secret: bytes,
    encoder: Encoder,
    *,
    isolate: bool = False,
    steer: Steer | None = None,
) -> PreparedPrompt:
    """Normalise, place markers, key and hash one call. Pure apart from the encoder (and the
    autopilot's memory, when `steer` is given). `isolate`, `steer`: see `prepare_call`."""
    options = normalise_options(policy)
    salt = salt_for(policy, secret, tenant_id)
    return prepare_call(
        wire, body, request, policy, tenant_id, salt, encoder, options, isolate=isolate, steer=steer
    )


def prepare_call(
    wire: WireFormat,
    body: Mapping[str, JSON],
    request: ChatRequest,
    policy: CachePolicy,
    tenant_id: str,
    salt: str,
    encoder: Encoder,
    options: NormaliseOptions,
    memo: PrefixHashMemo | None = None,
    tool_texts: ToolTextMemo | None = None,
    layouts: SessionLayoutMemo | None = None,
    *,
    isolate: bool = False,
    steer: Steer | None = None,
) -> PreparedPrompt:
    """`steer`: the cache autopilot (gateway/core/cache_autopilot.py), when the caller keeps
    session memory. `isolate`: the call may reach a provider whose prompt cache is shared by every tenant of
    its credentials; unless the tenant shares its cache (`scope: shared`, no salt), its
    prompt then carries its scope line (cachekeys.isolation) after its declared-public head."""
    edited = normalise_request(request, options)
    new_body = normalise_raw(wire, body, options)
    if isolate and salt:
        line = scope_line(salt)
        edited = isolate_request(edited, line, options.public)
        new_body = isolate_raw(wire, new_body, line, options.public)
    layouts = layouts if memo is not None else None  # an entry keeps the memo's chain states
    found: LayoutMatch | None = None
    if layouts is not None:
        layout_key = layouts.key(tenant_id, wire, edited)
        found = layouts.match(layout_key, edited, options, salt)
        edited = found.shared(edited) if found is not None else edited  # equal: last call's objects
    normalised = edited  # as laid out (the markers below change no block)
    if found is None:
        blocks = request_blocks(edited, options.public, tool_texts)
        ids = [encoder.encode(request.model, b.text, b.digest) for b in blocks]
    else:  # the conversation's previous call: its blocks and ids for the part re-sent
        blocks = request_blocks(edited, options.public, tool_texts, found.known())
        reused = found.num_blocks
        ids = [*found.entry.block_ids[:reused]]
        ids += [encoder.encode(request.model, b.text, b.digest) for b in blocks[reused:]]
    layout = PromptLayout(blocks, tuple(len(i) for i in ids))
    caching = policy.scope != "none"
    root = None if found is None else found.root()
    steering = None if steer is None or not caching else steer(layout, salt, root)
    advice = default_advice(policy.ttl) if steering is None else steering.advice
    marked: tuple[int, ...] = ()
    if caching and policy.markers == "auto":
        minimum = min_cacheable_tokens(
            request.model, {m.family: m.tokens for m in policy.min_cacheable_tokens}
        )
        plan = plan_markers(layout, advice, minimum)
        edited, marked = apply_to_request(edited, layout, plan), plan.indices
        if wire == "anthropic":
            new_body = _mark_raw(new_body, layout, request.model, advice, minimum, options, encoder)
    key = None if found is None else found.cache_key(request.prompt_cache_key)
    if key is None:
        key = prompt_cache_key(layout, salt, request.prompt_cache_key)
    if steering is not None:
        root = steering.root
    if root is None:
        root = session_root(layout, salt)
    if caching:  # canonical too: a translated call to an OpenAI backend carries it
        edited = replace(edited, prompt_cache_key=key)
        if wire == "openai":
            new_body["prompt_cache_key"] = key
    mode: CacheMode = "automatic" if wire == "openai" else "breakpoints"
    fingerprint = PromptFingerprint.of(
        layout, tenant_id, request.model, marked, mode, TTL_S[advice.ttl], options_digest(request)
    )
    if steering is not None:
        fingerprint = replace(
            fingerprint,
            masked=tuple(p.masked for p in steering.probes[: len(fingerprint.digests)]),
            patterns=tuple(p.pattern for p in steering.probes[: len(fingerprint.digests)]),
        )
    if memo is None:
        hashes = prefix_hashes(layout, ids, salt)
    else:
        public_tokens = layout.public_tokens()
        resume = None if found is None else found.chain(public_tokens)
        hashes, states = memo.walk(layout, ids, salt, request.model, resume)
        if layouts is not None:
            entry = LayoutEntry.of(
                options,
                salt,
                normalised,
                blocks,
                tuple(ids),
                public_tokens,
                hashes,
                states,
                key,
                root,
            )
            layouts.remember(layout_key, entry)
    return PreparedPrompt(
        body=new_body,
        request=edited,
        session_root=root,
        cache_salt=salt,
        prefix_hashes=hashes,
        stable_prefix_tokens=layout.stable_tokens(),
        diagnosis=PromptFacts(tenant_id, fingerprint, key, layout, tuple(ids), steering),
        write_ttl=_write_ttl(policy, advice, layout, new_body),
    )


def _write_ttl(
    policy: CachePolicy, advice: Advice, layout: PromptLayout, body: Mapping[str, JSON]
) -> str:
    """ "1h" when any cache write of the call may have the 1 h TTL (Lantern's markers with the
    1 h lifetime, or a marker of the client's own), else "5m"."""
    if policy.scope != "none" and advice.ttl == "1h":
        return "1h"
    request_level = body.get("cache_control")
    if isinstance(request_level, Mapping) and request_level.get("ttl") == "1h":
        return "1h"
    return "1h" if any(b.marker_ttl == "1h" for b in layout.blocks) else "5m"


def _mark_raw(
    body: dict[str, JSON],
    canonical: PromptLayout,
    model: str,
    advice: Advice,
    minimum: int,
    options: NormaliseOptions,
    encoder: Encoder,
) -> dict[str, JSON]:
    blocks = anthropic_blocks(body, options.public)
    same_shape = [b.level for b in blocks] == [b.level for b in canonical.blocks]
    tokens = (
        canonical.tokens
        if same_shape
        else tuple(len(encoder.encode(model, b.text, b.digest)) for b in blocks)
    )
    layout = PromptLayout(blocks, tokens)
    automatic = 1 if "cache_control" in body else 0  # the request-level marker takes a slot
    if not same_shape and advice.limit is not None:  # the limit indexes the canonical layout
        name = canonical.blocks[advice.limit].name
        at = next((i for i, b in enumerate(blocks) if b.name == name), 0)
        advice = replace(advice, limit=at)
    plan = plan_markers(layout, advice, minimum, automatic)
    return apply_to_anthropic(body, layout, plan)
