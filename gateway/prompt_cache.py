"""Prompt-cache glue for the pipeline: policy → cachekeys options, `prepare`, session diagnosis.

Owns the per-process session table (bounded LRU, injected clock) and the cache metrics; all
prompt logic lives in cachekeys. The session table keeps digests and token counts only; the
port's layout memo (`cachekeys.session_layout`) keeps each conversation's previous request parts
in memory (bounded), so a call that re-sends its history lays out only the new tail.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import orjson
from prometheus_client import CollectorRegistry, Counter

from adapters.tokens import TokenCounter, TokenIdsMemo
from adapters.types import (
    JSON,
    ChatRequest,
    ContentPart,
    Message,
    ToolUsePart,
    Usage,
    WireFormat,
)
from cachekeys.blockhash import tenant_salt
from cachekeys.canonical import SchemaMemo
from cachekeys.chain_memo import PrefixHashMemo
from cachekeys.diagnosis import (
    CacheDiagnosis,
    CacheMode,
    PromptFingerprint,
    Reason,
    diagnose,
    options_digest,
)
from cachekeys.keys import prefix_hashes, prompt_cache_key, session_root
from cachekeys.layout import PromptLayout, ToolTextMemo, anthropic_blocks, request_blocks
from cachekeys.markers import (
    apply_to_anthropic,
    apply_to_request,
    min_cacheable_tokens,
    plan_breakpoints,
)
from cachekeys.normalise import NormaliseOptions, PublicPrefix, normalise_request
from cachekeys.raw import normalise_raw
from cachekeys.session_layout import LayoutEntry, LayoutMatch, SessionLayoutMemo
from cachekeys.volatile import VolatileMatcher
from gateway.memo import MAX_ENTRIES, PerObjectMemo
from gateway.ports import CacheVerdict, PreparedPrompt
from gateway.telemetry import LabelChildren
from policies.cache import CachePolicy
from policies.model import TenantPolicy

TTL_S = {"5m": 300.0, "1h": 3600.0}
MAX_SESSIONS = 100_000


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


def prepare(
    wire: WireFormat,
    body: Mapping[str, JSON],
    request: ChatRequest,
    policy: CachePolicy,
    tenant_id: str,
    secret: bytes,
    encoder: Encoder,
) -> PreparedPrompt:
    """Normalise, place markers, key and hash one call. Pure apart from the encoder."""
    options = normalise_options(policy)
    salt = salt_for(policy, secret, tenant_id)
    return _prepare(wire, body, request, policy, tenant_id, salt, encoder, options)


def _prepare(
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
) -> PreparedPrompt:
    edited = normalise_request(request, options)
    new_body = normalise_raw(wire, body, options)
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
    marked: tuple[int, ...] = ()
    if caching and policy.markers == "auto":
        minimum = min_cacheable_tokens(
            request.model, {m.family: m.tokens for m in policy.min_cacheable_tokens}
        )
        plan = plan_breakpoints(layout, policy.ttl, minimum)
        edited, marked = apply_to_request(edited, layout, plan), plan.indices
        if wire == "anthropic":
            new_body = _mark_raw(new_body, layout, request.model, policy, minimum, options, encoder)
    key = None if found is None else found.cache_key(request.prompt_cache_key)
    if key is None:
        key = prompt_cache_key(layout, salt, request.prompt_cache_key)
    root = None if found is None else found.root()
    if root is None:
        root = session_root(layout, salt)
    if caching:  # canonical too: a translated call to an OpenAI backend carries it
        edited = replace(edited, prompt_cache_key=key)
        if wire == "openai":
            new_body["prompt_cache_key"] = key
    mode: CacheMode = "automatic" if wire == "openai" else "breakpoints"
    fingerprint = PromptFingerprint.of(
        layout, tenant_id, request.model, marked, mode, TTL_S[policy.ttl], options_digest(request)
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
        diagnosis=PromptFacts(tenant_id, fingerprint, key, layout, tuple(ids)),
        write_ttl=_write_ttl(policy, layout, new_body),
    )


def _write_ttl(policy: CachePolicy, layout: PromptLayout, body: Mapping[str, JSON]) -> str:
    """ "1h" when any cache write of the call may have the 1 h TTL (Lantern's markers under
    `ttl: 1h`, or a marker of the client's own), else "5m"."""
    if policy.scope != "none" and policy.ttl == "1h":
        return "1h"
    request_level = body.get("cache_control")
    if isinstance(request_level, Mapping) and request_level.get("ttl") == "1h":
        return "1h"
    return "1h" if any(b.marker_ttl == "1h" for b in layout.blocks) else "5m"


def _mark_raw(
    body: dict[str, JSON],
    canonical: PromptLayout,
    model: str,
    policy: CachePolicy,
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
    plan = plan_breakpoints(layout, policy.ttl, minimum, automatic)
    return apply_to_anthropic(body, layout, plan)


# --- session diagnosis ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CacheReport:
    """One call's diagnosis, as the header, the ledger JSON and the metrics see it."""

    tenant: str
    session_id: str
    call_index: int  # 0 for the first call Lantern saw in this session
    diagnosis: CacheDiagnosis

    def header_value(self) -> str:
        """The client sees its own call only: a session id last used by another tenant reads as
        a first call (the ledger keeps `tenant_changed` for the admin)."""
        d = self.diagnosis
        if d.reason == Reason.TENANT_CHANGED:
            return f"first_call; prefix={d.stable_prefix_tokens}; expected=0; read=0"
        parts = [d.reason.value]
        if d.first_changed:
            parts.append(f"block={d.first_changed}")
        parts += [
            f"prefix={d.stable_prefix_tokens}",
            f"expected={d.expected_prefix_tokens}",
            f"read={d.predicted_read_tokens}",
        ]
        return "; ".join(parts)

    def to_json(self) -> str:
        body = {"call": self.call_index, "tenant": self.tenant, **self.diagnosis.as_dict()}
        gap_s = self.diagnosis.gap_s
        body["gap_s"] = None if gap_s is None else round(gap_s, 3)
        return orjson.dumps(body).decode()


class SessionCacheTracker:
    """The previous call of each session (bounded LRU), compared with each new call."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: OrderedDict[str, tuple[PromptFingerprint, float, int]] = OrderedDict()
        self._max = max_sessions

    def observe(
        self, tenant: str, session_id: str, prepared: PreparedPrompt, now_s: float
    ) -> CacheReport:
        facts = prepared.diagnosis
        if not isinstance(facts, PromptFacts):
            raise TypeError("observe() needs a PreparedPrompt made by gateway.prompt_cache.prepare")
        fingerprint = facts.fingerprint
        previous = self._sessions.pop(session_id, None)
        if previous is None:
            diagnosis, index = diagnose(None, None, fingerprint, now_s), 0
        else:
            diagnosis, index = (
                diagnose(previous[0], previous[1], fingerprint, now_s),
                previous[2] + 1,
            )
        self._sessions[session_id] = (fingerprint, now_s, index)
        while len(self._sessions) > self._max:
            self._sessions.popitem(last=False)
        return CacheReport(tenant, session_id, index, diagnosis)

    def __len__(self) -> int:
        return len(self._sessions)


class CacheMetrics:
    """Prefix stability and predicted-vs-reported cache reads, per tenant."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry or CollectorRegistry()
        self.calls = Counter(
            "lantern_cache_calls", "Calls by cache diagnosis", ["tenant", "reason"], registry=r
        )
        self.predicted = Counter(
            "lantern_cache_predicted_read_tokens",
            "Cache reads Lantern predicted",
            ["tenant"],
            registry=r,
        )
        self.reported = Counter(
            "lantern_cache_reported_read_tokens",
            "Cache reads the provider reported",
            ["tenant"],
            registry=r,
        )
        self.surprises = Counter(
            "lantern_cache_prediction_misses",
            "Calls whose reported reads differ from the prediction",
            ["tenant", "direction"],
            registry=r,
        )
        self.child = LabelChildren()


RECONCILE_SLACK_TOKENS = 64  # our tokenizer is not the provider's: small deltas are expected
RECONCILE_SLACK_RATIO = 0.05


def reconcile(report_json: str, reported_cache_read_tokens: int, metrics: CacheMetrics) -> int:
    """Record predicted vs reported reads; returns reported - predicted. A delta beyond the
    tokenizer slack counts as a prediction miss ("less": a break Lantern did not foresee)."""
    body = orjson.loads(report_json)
    tenant, predicted = str(body["tenant"]), int(body["predicted_read_tokens"])
    metrics.child(metrics.predicted, tenant).inc(predicted)
    metrics.child(metrics.reported, tenant).inc(reported_cache_read_tokens)
    delta = reported_cache_read_tokens - predicted
    slack = RECONCILE_SLACK_TOKENS + RECONCILE_SLACK_RATIO * max(
        predicted, reported_cache_read_tokens
    )
    if abs(delta) > slack:
        metrics.child(metrics.surprises, tenant, "more" if delta > 0 else "less").inc()
    return delta


class PromptCachePort:
    """The pipeline's `PromptPort`: prepare, observe, reconcile."""

    def __init__(
        self,
        secret: bytes,
        *,
        registry: CollectorRegistry | None = None,
        encoder: Encoder | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._secret = secret
        self._encoder = encoder or TiktokenEncoder()
        self._clock = clock
        self._matchers: dict[tuple[str, ...], VolatileMatcher] = {}
        self._hashes = PrefixHashMemo()
        self._layouts = SessionLayoutMemo()
        self._schemas = SchemaMemo()
        self._tool_texts = ToolTextMemo()
        # options per tenant policy object (a reload makes a new one): built twice a call before
        self._options_for: PerObjectMemo[CachePolicy, NormaliseOptions] = PerObjectMemo(
            lambda policy: normalise_options(policy, self._matchers, self._schemas)
        )
        self._salts: dict[str, str] = {}  # tenant id -> its salt (HMAC of the port's secret)
        self.tracker = SessionCacheTracker(max_sessions)
        self.metrics = CacheMetrics(registry)

    def prepare(
        self,
        wire: WireFormat,
        body: Mapping[str, JSON],
        request: ChatRequest,
        tenant: TenantPolicy,
        model: str,
    ) -> PreparedPrompt:
        options = self._options_for(tenant.cache)
        return _prepare(
            wire,
            body,
            request,
            tenant.cache,
            tenant.tenant,
            salt_for(tenant.cache, self._secret, tenant.tenant, self._tenant_salt),
            self._encoder,
            options,
            self._hashes,
            self._tool_texts,
            self._layouts,
        )

    def _tenant_salt(self, secret: bytes, tenant_id: str) -> str:
        """`tenant_salt`, memoised per tenant id (the secret is always the port's own)."""
        salt = self._salts.get(tenant_id)
        if salt is None:
            if len(self._salts) >= MAX_ENTRIES:
                self._salts.clear()  # a bound, as the options memo
            salt = self._salts[tenant_id] = tenant_salt(secret, tenant_id)
        return salt

    def observe(
        self, tenant: TenantPolicy, session_id: str, prepared: PreparedPrompt
    ) -> CacheVerdict:
        report = self.tracker.observe(tenant.tenant, session_id, prepared, self._clock())
        metrics = self.metrics
        metrics.child(metrics.calls, tenant.tenant, report.diagnosis.reason.value).inc()
        return CacheVerdict(header=report.header_value(), diagnosis_json=report.to_json())

    def reconcile(self, verdict: CacheVerdict, usage: Usage) -> None:
        reconcile(verdict.diagnosis_json, usage.cache_read_tokens, self.metrics)

    def answer_hashes(
        self, wire: WireFormat, tenant: TenantPolicy, prepared: PreparedPrompt, answer: Message
    ) -> tuple[bytes, ...]:
        """The chain the session's next call will start with: this call's prompt (less Lantern's
        relocated volatile tail, which the next call moves past the answer) and then the answer,
        as a client echoes it back. Blocks already hashed come from the memo."""
        options = self._options_for(tenant.cache)
        echoed = _as_echoed(wire, answer)
        model = prepared.request.model
        facts = prepared.diagnosis
        if isinstance(facts, PromptFacts) and facts.layout is not None:
            # the prompt's blocks as prepare() laid them out (markers change no digest), then
            # the answer's: a block's digest does not depend on its message's position
            known = facts.layout.blocks, facts.block_ids
            added = request_blocks(
                ChatRequest(model, messages=(echoed,)), options.public, self._tool_texts
            )
            pairs = [*zip(*known, strict=True)]
            pairs += [(b, self._encoder.encode(model, b.text, b.digest)) for b in added]
            kept = [(b, i) for b, i in pairs if not b.is_volatile]
            blocks, ids = tuple(b for b, _ in kept), [i for _, i in kept]
        else:  # a PreparedPrompt made elsewhere: lay the whole extended prompt out again
            extended = replace(prepared.request, messages=(*prepared.request.messages, echoed))
            all_blocks = request_blocks(extended, options.public, self._tool_texts)
            blocks = tuple(b for b in all_blocks if not b.is_volatile)
            ids = [self._encoder.encode(model, b.text, b.digest) for b in blocks]
        layout = PromptLayout(blocks, tuple(len(i) for i in ids))
        return self._hashes.prefix_hashes(layout, ids, prepared.cache_salt, model)


def _as_echoed(wire: WireFormat, answer: Message) -> Message:
    """An Anthropic client sends a tool call back as an `input` object, which the next call
    decodes to compact JSON; an OpenAI client sends the model's `arguments` string as it was."""
    if wire != "anthropic":
        return answer
    return replace(answer, content=tuple(_compact(p) for p in answer.content))


def _compact(part: ContentPart) -> ContentPart:
    if not isinstance(part, ToolUsePart):
        return part
    try:
        return replace(
            part, arguments_json=orjson.dumps(orjson.loads(part.arguments_json)).decode()
        )
    except orjson.JSONDecodeError:  # a broken stream's partial arguments: keep them as produced
        return part
