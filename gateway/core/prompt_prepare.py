"""Preparing one call's prompt: normalise, isolate, lay out, mark, key, hash (the tenant's policy
as cachekeys options: gateway/core/prompt_policy.py).

Pure apart from the token encoder; all prompt logic lives in cachekeys. Must not keep sessions
or metrics (gateway/core/cache_diagnosis.py) nor hold the port's memos (gateway/core/prompt_cache.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from adapters.records import evolve, slot_init
from adapters.tokens import MEMO_MAX_BYTES, TokenCounter, TokenIdsMemo
from adapters.types import (
    JSON,
    ChatRequest,
    WireFormat,
)
from cachekeys.chain_memo import ChainState
from cachekeys.conversation_memo import ConversationMemo
from cachekeys.diagnosis import (
    CacheMode,
    PromptFingerprint,
    options_digest,
)
from cachekeys.isolation import isolate, isolate_responses, scope_line
from cachekeys.keys import prefix_hashes, prompt_cache_key, session_root
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.markers import apply_to_anthropic, apply_to_request, min_cacheable_tokens
from cachekeys.normalise import Edits, NormaliseOptions, normalise_edits
from cachekeys.planner import Advice, Steering, default_advice, plan_markers
from cachekeys.raw_layout import anthropic_layout
from cachekeys.session_layout import LayoutEntry, LayoutKey, LayoutMatch
from gateway.core.prompt_policy import normalise_options, public_prefix, salt_for
from gateway.core.prompt_view import ToolLists, typed_changes
from gateway.ports import PreparedPrompt
from policies.cache import CachePolicy

TTL_S = {"5m": 300.0, "1h": 3600.0}
# The cache autopilot's hook: (layout, salt, the conversation's known root) -> its steering
Steer = Callable[[PromptLayout, str, str | None], Steering]


class Encoder(Protocol):
    """Token ids of a text for a model (adapters.tokens.TokenCounter fits via `TiktokenEncoder`).
    `digest`, when given, determines the text (a prompt block's digest): a memo may key on it.
    `scope` is the tenant: a memo shares no entry between scopes."""

    def encode(self, model: str, text: str, digest: bytes | None, scope: str) -> Sequence[int]: ...


class TiktokenEncoder:
    """tiktoken ids, memoised per block text: an agent re-sends its history on every call, so
    only the new blocks of a call are tokenised. Pass the gateway's shared `counter` so token
    counting reads the same memo (each text is encoded once per process, not once per use)."""

    def __init__(
        self, max_cached_bytes: int = MEMO_MAX_BYTES, counter: TokenCounter | None = None
    ) -> None:
        counter = counter or TokenCounter(TokenIdsMemo(max_cached_bytes))
        if counter.memo is None:
            raise ValueError("TiktokenEncoder needs a TokenCounter with a memo")
        self._counter = counter
        self._memo = counter.memo

    def encode(self, model: str, text: str, digest: bytes | None, scope: str) -> Sequence[int]:
        return self._memo.ids(self._counter.encoding(model), text, digest, scope)

    @property
    def num_cached_tokens(self) -> int:
        return self._memo.num_tokens


def scoped_native_body(
    body: Mapping[str, JSON], prepared: PreparedPrompt, policy: CachePolicy
) -> dict[str, JSON]:
    """A door's own body (the Responses API's, forwarded natively) scoped as its chat twin was
    prepared: the tenant-scoped `prompt_cache_key` and, when the prompt carries one, the scope
    line at the head of its private part, so a native call shares no provider entry either."""
    out = dict(body)
    if policy.scope != "none":
        out["prompt_cache_key"] = prepared.request.prompt_cache_key
    if prepared.scope_line:
        out = isolate_responses(out, prepared.scope_line, public_prefix(policy))
    return out


@slot_init
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
    edits: Edits = Edits()  # what normalisation moved or re-serialised


@slot_init
@dataclass(frozen=True, slots=True)
class PromptCall:
    """One call's prompt with its tenant's cache settings, as `prepare_call` takes it.
    `isolate`: the call may reach a provider whose prompt cache is shared by every tenant of
    its credentials; unless the tenant shares its cache (`scope: shared`, no salt), its prompt
    then carries its scope line (cachekeys.isolation) after its declared-public head."""

    wire: WireFormat
    body: Mapping[str, JSON]
    request: ChatRequest  # decoded from `body`
    policy: CachePolicy
    tenant_id: str
    salt: str
    options: NormaliseOptions
    isolate: bool = False
    steer: Steer | None = None  # the cache autopilot (gateway/core/cache_autopilot.py)
    # False: no one reads the prefix hashes (`gateway.fleet.registry.indexed_models`)
    hash_prefix: bool = True
    # False: no backend of the route sends markers on (`gateway.core.models_table.marked_models`)
    mark: bool = True


@slot_init
@dataclass(frozen=True, slots=True)
class LaidOut:
    """The normalised request as laid out, its blocks' token ids, and the conversation's
    previous call when its layout was reused."""

    request: ChatRequest
    layout: PromptLayout
    ids: tuple[Sequence[int], ...]
    found: LayoutMatch | None = None
    key: LayoutKey | None = None


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
    autopilot's memory, when `steer` is given). `isolate`, `steer`: see `PromptCall`."""
    salt = salt_for(policy, secret, tenant_id)
    options = normalise_options(policy)
    call = PromptCall(wire, body, request, policy, tenant_id, salt, options, isolate, steer)
    return prepare_call(call, encoder)


def prepare_call(
    call: PromptCall,
    encoder: Encoder,
    memos: ConversationMemo | None = None,
    tool_lists: ToolLists | None = None,
) -> PreparedPrompt:
    """Normalise the body (the typed request is its view), lay out, mark, key and hash."""
    body, changes, edits = normalised(call, tool_lists)
    laid = lay_out(call, changes, encoder, memos)
    steering = _steering(call, laid)
    advice = default_advice(call.policy.ttl) if steering is None else steering.advice
    key, root = _keys(call, laid)
    body, request, marked = place_markers(call, body, laid, encoder, advice, key)
    if steering is not None:
        root = steering.root
    if call.policy.scope != "none" and call.wire == "openai":
        body["prompt_cache_key"] = key
    hashes = _hashes(call, laid, memos, key, root)
    return PreparedPrompt(
        body=body,
        request=request,
        session_root=root,
        cache_salt=call.salt,
        prefix_hashes=hashes,
        stable_prefix_tokens=laid.layout.stable_tokens(),
        diagnosis=PromptFacts(
            call.tenant_id,
            _fingerprint(call, laid, marked, advice, steering),
            key,
            laid.layout,
            laid.ids,
            steering,
            edits,
        ),
        write_ttl=_write_ttl(call.policy, advice, laid.layout, body),
        public_head=laid.layout.public_head(),
        scope_line=scope_line(call.salt) if call.isolate and call.salt else "",
    )


def _steering(call: PromptCall, laid: LaidOut) -> Steering | None:
    """The autopilot's decision for a caching call, given the conversation's known root."""
    if call.steer is None or call.policy.scope == "none":
        return None
    root = None if laid.found is None else laid.found.root()
    return call.steer(laid.layout, call.salt, root)


def normalised(
    call: PromptCall, tool_lists: ToolLists | None = None
) -> tuple[dict[str, JSON], dict[str, Any], Edits]:
    """The body after normalisation and isolation, the fields of the typed request that
    decoding it changes (`typed_changes`), and what normalisation moved."""
    body, edits = normalise_edits(call.wire, call.body, call.options)
    if call.isolate and call.salt:
        body = isolate(call.wire, body, scope_line(call.salt), call.options.public)
    return body, typed_changes(call.wire, call.body, body, call.request, tool_lists), edits


def lay_out(
    call: PromptCall, changes: dict[str, Any], encoder: Encoder, memos: ConversationMemo | None
) -> LaidOut:
    """The normalised request (the client's with `changes`, from `normalised`), its blocks and
    token ids; with the memos, the part the conversation's previous call laid out is taken from
    it, and the request holds that call's equal objects (made in the same copy)."""
    request, public, model = call.request, call.options.public, call.request.model
    scope = call.tenant_id  # no memo entry of another tenant's: its speed would tell
    if memos is None:
        request = evolve(request, **changes) if changes else request
        blocks = request_blocks(request, public)
        ids = tuple(encoder.encode(model, b.text, b.digest, scope) for b in blocks)
        return LaidOut(request, PromptLayout(blocks, tuple(len(i) for i in ids)), ids)
    messages = changes.get("messages", request.messages)
    key = memos.layouts.key_of(call.tenant_id, call.wire, request.session_id, messages)
    tools, system = changes.get("tools", request.tools), changes.get("system", request.system)
    found = memos.layouts.match_parts(
        key, (model, tools, system, messages), call.options, call.salt
    )
    if found is not None:
        changes = {**changes, **found.shared_fields(messages)}
    request = evolve(request, **changes) if changes else request
    if found is None:
        blocks = request_blocks(request, public, memos.tool_texts)
        ids = tuple(encoder.encode(model, b.text, b.digest, scope) for b in blocks)
    else:
        blocks = request_blocks(request, public, memos.tool_texts, found.known())
        reused = found.num_blocks
        new = [encoder.encode(model, b.text, b.digest, scope) for b in blocks[reused:]]
        ids = (*found.entry.block_ids[:reused], *new)
    layout = PromptLayout(blocks, tuple(map(len, ids)))
    return LaidOut(request, layout, ids, found, key)


def place_markers(
    call: PromptCall,
    body: dict[str, JSON],
    laid: LaidOut,
    encoder: Encoder,
    advice: Advice,
    cache_key: str,
) -> tuple[dict[str, JSON], ChatRequest, tuple[int, ...]]:
    """Lantern's cache markers (`markers: auto`, planned by `advice`) on the typed request
    and, on the Anthropic wire, on the body; and the indices of the marked blocks. Unless the
    tenant's scope is `none`, the request also gets `cache_key` as its `prompt_cache_key`
    (canonical too: a translated call to an OpenAI backend), in the same copy."""
    policy, model, request = call.policy, call.request.model, laid.request
    if policy.scope == "none":
        return body, request, ()
    # an OpenAI-wire call that no backend of its route sends markers for: none planned (its
    # diagnosis reads no breakpoints either: OpenAI caches prefixes without them)
    if policy.markers != "auto" or (call.wire == "openai" and not call.mark):
        return body, evolve(request, prompt_cache_key=cache_key), ()
    families = policy.min_cacheable_tokens
    minimum = min_cacheable_tokens(
        model, {m.family: m.tokens for m in families} if families else None
    )
    plan = plan_markers(laid.layout, advice, minimum)
    request = apply_to_request(request, laid.layout, plan, prompt_cache_key=cache_key)
    if call.wire == "anthropic":
        body = _mark_raw(body, laid.layout, model, advice, minimum, encoder, call.tenant_id)
    return body, request, plan.indices


def _keys(call: PromptCall, laid: LaidOut) -> tuple[str, str]:
    """The OpenAI `prompt_cache_key` and the session root (the previous call's when they hold)."""
    client_key = call.request.prompt_cache_key
    found = laid.found
    key = None if found is None else found.cache_key(client_key)
    root = None if found is None else found.root()
    if key is None:
        key = prompt_cache_key(laid.layout, call.salt, client_key)
    if root is None:
        root = session_root(laid.layout, call.salt)
    return key, root


def _fingerprint(
    call: PromptCall,
    laid: LaidOut,
    marked: tuple[int, ...],
    advice: Advice,
    steering: Steering | None,
) -> PromptFingerprint:
    mode: CacheMode = "automatic" if call.wire == "openai" else "breakpoints"
    options = options_digest(call.request)
    probes = () if steering is None else steering.probes
    return PromptFingerprint.of(
        laid.layout, call.request.model, marked, mode, TTL_S[advice.ttl], options, probes
    )


def _hashes(
    call: PromptCall, laid: LaidOut, memos: ConversationMemo | None, key: str, root: str
) -> tuple[bytes, ...]:
    """The prefix block hashes (none where `call.hash_prefix` is off); with the memos, resumed
    from the conversation's previous call and remembered for its next one."""
    layout, ids = laid.layout, laid.ids
    if memos is None:
        return prefix_hashes(layout, ids, call.salt) if call.hash_prefix else ()
    public_tokens = layout.public_tokens()
    hashes: tuple[bytes, ...] = ()
    states: tuple[ChainState, ...] = ()  # an entry without a chain: a later walk starts over
    if call.hash_prefix:
        resume = None if laid.found is None else laid.found.chain(public_tokens)
        hashes, states = memos.hashes.walk(layout, ids, call.salt, call.request.model, resume)
    assert laid.key is not None  # laid out with the memos
    chain = (public_tokens, hashes, states)
    entry = LayoutEntry.of(
        call.options, call.salt, laid.request, layout.blocks, ids, chain, key, root
    )
    memos.layouts.remember(laid.key, entry)
    return hashes


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
    return "1h" if "1h" in [b.marker_ttl for b in layout.blocks] else "5m"


def _mark_raw(
    body: dict[str, JSON],
    typed: PromptLayout,
    model: str,
    advice: Advice,
    minimum: int,
    encoder: Encoder,
    scope: str,
) -> dict[str, JSON]:
    """The plan over the Anthropic body's own blocks (its thinking blocks count towards the
    look-back), put onto the body."""
    layout = anthropic_layout(
        body, typed, lambda b: len(encoder.encode(model, b.text, b.digest, scope))
    )
    automatic = 1 if "cache_control" in body else 0  # the request-level marker takes a slot
    if len(layout.blocks) != len(typed.blocks) and advice.limit is not None:
        name = typed.blocks[advice.limit].name  # the limit indexes the typed layout
        at = next((i for i, b in enumerate(layout.blocks) if b.name == name), 0)
        advice = replace(advice, limit=at)
    plan = plan_markers(layout, advice, minimum, automatic)
    return apply_to_anthropic(body, layout, plan)
