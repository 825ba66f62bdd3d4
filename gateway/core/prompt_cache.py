"""The pipeline's `PromptPort`: prepare (gateway/core/prompt_prepare.py) with the port's memos,
session diagnosis (gateway/core/cache_diagnosis.py), reconcile, and the chain a session's answer adds.

Owns the per-process memos: the conversation memo (`cachekeys.conversation_memo`: each
conversation's previous call, in memory and bounded, so a call that re-sends its history lays
out only the new tail) and, per tenant policy object, its options and salt. All prompt logic
lives in cachekeys.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

import orjson
from prometheus_client import CollectorRegistry

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
from cachekeys.canonical import canonical_arguments
from cachekeys.conversation_memo import ConversationMemo
from cachekeys.keys import head_write_key
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.normalise import NormaliseOptions
from cachekeys.planner import Steering
from gateway.core.cache_autopilot import CacheAutopilot, add_steering
from gateway.core.cache_diagnosis import (
    MAX_SESSIONS,
    CacheMetrics,
    CacheReport,
    SessionCacheTracker,
    reconcile,
)
from gateway.core.cache_learning import session_key
from gateway.core.cache_learning_shared import SharedPlaces
from gateway.core.memo import MAX_ENTRIES, PerObjectMemo
from gateway.core.prompt_prepare import (
    Encoder,
    PromptCall,
    PromptFacts,
    TiktokenEncoder,
    normalise_options,
    prepare,
    prepare_call,
    salt_for,
)
from gateway.core.prompt_view import ToolLists
from gateway.ports import CacheVerdict, PreparedPrompt
from policies.cache import CachePolicy
from policies.model import TenantPolicy

MIN_HEAD_TOKENS = 1024  # below every provider's minimum cacheable prefix: nothing to share

__all__ = [
    "CacheReport",
    "Encoder",
    "PromptCachePort",
    "PromptFacts",
    "SessionCacheTracker",
    "TiktokenEncoder",
    "prepare",
]


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
        shared_cache_models: frozenset[str] = frozenset(),
        indexed_models: frozenset[str] | None = None,
        marked_models: frozenset[str] | None = None,
    ) -> None:
        """`shared_cache_models`: the model routes with a backend whose provider prompt cache
        tenants would share (`gateway.core.models_table.shared_cache_models`): their calls carry
        the tenant's scope line. `indexed_models`: the routes whose calls' prefix hashes the
        router reads (`gateway.fleet.registry.indexed_models`); other calls are not hashed.
        None: every call is. `marked_models`: the routes with a backend that sends cache markers
        on (`gateway.core.models_table.marked_models`); OpenAI-wire calls to other routes get
        none planned. None: every route may."""
        self._secret = secret
        self._shared_cache_models = shared_cache_models
        self._indexed_models = indexed_models
        self._marked_models = marked_models
        self._encoder = encoder or TiktokenEncoder()
        self._clock = clock
        self._memos = ConversationMemo()
        # options per tenant policy object (a reload makes a new one): built twice a call before
        self._options_for: PerObjectMemo[CachePolicy, NormaliseOptions] = PerObjectMemo(
            lambda policy: normalise_options(policy, self._memos.schemas)
        )
        self._tool_lists = ToolLists()
        # tenant -> (policy, learnt patterns, options) for tenants with learnt places
        self._learned_options: dict[str, tuple[CachePolicy, tuple[str, ...], NormaliseOptions]] = {}
        # the same, for a session that keeps the values of the places it taught
        self._frozen_by: dict[
            tuple[str, tuple[tuple[str, str], ...]],
            tuple[CachePolicy, tuple[str, ...], NormaliseOptions],
        ] = {}
        self._salts: dict[str, str] = {}  # tenant id -> its salt (HMAC of the port's secret)
        self.tracker = SessionCacheTracker(max_sessions)
        self.autopilot = CacheAutopilot(clock, max_sessions)
        self.metrics = CacheMetrics(registry)
        self.shared: SharedPlaces | None = None  # the learnt places shared through Redis

    def ready(self, tenant: str) -> Awaitable[None] | None:
        return None if self.shared is None else self.shared.ready(tenant)

    def prepare(
        self,
        wire: WireFormat,
        body: Mapping[str, JSON],
        request: ChatRequest,
        tenant: TenantPolicy,
        model: str,
    ) -> PreparedPrompt:
        policy = tenant.cache
        salt = salt_for(policy, self._secret, tenant.tenant, self._tenant_salt)
        isolate = model in self._shared_cache_models
        tenant_id = tenant.tenant
        options = self._options(policy, tenant_id, request)

        def steer(layout: PromptLayout, salt: str, root: str | None) -> Steering:
            return self.autopilot.steer(policy, tenant_id, layout, salt, root)

        hashed = self._indexed_models is None or model in self._indexed_models
        marked = self._marked_models is None or model in self._marked_models
        call = PromptCall(
            wire, body, request, policy, tenant_id, salt, options, isolate, steer, hashed, marked
        )
        learned = self.autopilot.learned
        version = learned.version
        prepared = prepare_call(call, self._encoder, self._memos, self._tool_lists)
        if learned.version != version and policy.normalise.relocate_volatile == "auto":
            # this call taught the autopilot a place: the session keeps the value the previous
            # call had in place (its prefix is read, not written again) and the newest value
            # goes to the tail; the tenant's later sessions relocate the place from their start
            discovered = self.autopilot.discovered
            if discovered is not None:
                learned.freeze(tenant_id, session_key(request), *discovered)
                self.autopilot.discovered = None
            call = replace(call, options=self._options(policy, tenant_id, request))
            prepared = prepare_call(call, self._encoder, self._memos, self._tool_lists)
        return prepared

    def _options(
        self, policy: CachePolicy, tenant_id: str, request: ChatRequest | None = None
    ) -> NormaliseOptions:
        """The policy's options, with the places the autopilot learnt for the tenant (one
        options object per learnt set, so the conversation memo keeps matching) and, for a
        session that taught one (known by `request`), the values it keeps in place."""
        places = self.autopilot.learned.tenants.get(tenant_id)
        if places is None or not places.patterns or policy.normalise.relocate_volatile != "auto":
            return self._options_for(policy)
        learned = places.patterns
        if places.frozen and request is not None:
            frozen = self.autopilot.learned.frozen(places, session_key(request))
            if frozen is not None:
                return self._frozen_options(policy, tenant_id, learned, frozen)
        found = self._learned_options.get(tenant_id)
        if found is None or found[0] is not policy or found[1] != learned:
            options = normalise_options(policy, self._memos.schemas, learned)
            if len(self._learned_options) >= MAX_ENTRIES:
                self._learned_options.clear()
            found = self._learned_options[tenant_id] = (policy, learned, options)
        return found[2]

    def _frozen_options(
        self,
        policy: CachePolicy,
        tenant_id: str,
        learned: tuple[str, ...],
        frozen: Mapping[str, str],
    ) -> NormaliseOptions:
        key = (tenant_id, tuple(sorted(frozen.items())))
        found = self._frozen_by.get(key)
        if found is None or found[0] is not policy or found[1] != learned:
            options = normalise_options(policy, self._memos.schemas, learned, frozen)
            if len(self._frozen_by) >= MAX_ENTRIES:
                self._frozen_by.clear()
            found = self._frozen_by[key] = (policy, learned, options)
        return found[2]

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
        """What the reply's header and the ledger row say of the call. The session's memory
        (the tracker's and the autopilot's) is written after the reply (`reconcile`), or by
        the first read that needs it."""
        tenant_id = tenant.tenant
        report = self.tracker.observe(tenant_id, session_id, prepared, self._clock())
        header, body = report.verdict_parts()
        self.metrics.calls.inc((tenant_id, str(report.diagnosis.reason)))
        facts = prepared.diagnosis
        write_key = None
        if isinstance(facts, PromptFacts) and facts.layout is not None:
            if facts.steering is not None:
                self.autopilot.remember(tenant_id, facts.steering, facts.layout)
                add_steering(body, facts.steering)
            # the head is part of the stable prefix: summed only when that could be large enough
            d = report.diagnosis
            if (
                d.stable_prefix_tokens >= MIN_HEAD_TOKENS
                and d.predicted_read_tokens < d.stable_prefix_tokens
            ):
                head = facts.fingerprint.head_tokens()
                if head >= MIN_HEAD_TOKENS and d.predicted_read_tokens < head:
                    write_key = head_write_key(facts.layout, prepared.cache_salt)
        diagnosis_json = orjson.dumps(body).decode()
        return CacheVerdict(header, diagnosis_json, write_key, body)

    def reconcile(self, verdict: CacheVerdict, usage: Usage) -> None:
        """After the reply: predicted vs reported reads, and the memory of the calls observed
        since the last time (this one's among them) written."""
        body = verdict.diagnosis or verdict.diagnosis_body()  # no call when it is at hand
        reconcile(body, usage.cache_read_tokens, self.metrics)
        self.tracker.flush()
        self.autopilot.flush()

    def answer_hashes(
        self, wire: WireFormat, tenant: TenantPolicy, prepared: PreparedPrompt, answer: Message
    ) -> tuple[bytes, ...]:
        """The chain the session's next call will start with: this call's prompt (less Lantern's
        relocated volatile tail, which the next call moves past the answer) and then the answer,
        as a client echoes it back. Blocks already hashed come from the memo."""
        options = self._options(tenant.cache, tenant.tenant)
        echoed = _as_echoed(wire, answer, options.canonical_tool_args)
        model = prepared.request.model
        facts = prepared.diagnosis
        if isinstance(facts, PromptFacts) and facts.layout is not None:
            # the prompt's blocks as prepare() laid them out (markers change no digest), then
            # the answer's: a block's digest does not depend on its message's position
            known = facts.layout.blocks, facts.block_ids
            added = request_blocks(
                ChatRequest(model, messages=(echoed,)), options.public, self._memos.tool_texts
            )
            pairs = [*zip(*known, strict=True)]
            scope = tenant.tenant
            pairs += [(b, self._encoder.encode(model, b.text, b.digest, scope)) for b in added]
            kept = [(b, i) for b, i in pairs if not b.is_volatile]
            blocks, ids = tuple(b for b, _ in kept), [i for _, i in kept]
        else:  # a PreparedPrompt made elsewhere: lay the whole extended prompt out again
            extended = replace(prepared.request, messages=(*prepared.request.messages, echoed))
            all_blocks = request_blocks(extended, options.public, self._memos.tool_texts)
            blocks = tuple(b for b in all_blocks if not b.is_volatile)
            ids = [self._encoder.encode(model, b.text, b.digest, tenant.tenant) for b in blocks]
        layout = PromptLayout(blocks, tuple(len(i) for i in ids))
        return self._memos.hashes.prefix_hashes(layout, ids, prepared.cache_salt, model)


def _as_echoed(wire: WireFormat, answer: Message, canonical: bool) -> Message:
    """An Anthropic client sends a tool call back as an `input` object, which the next call
    decodes to compact JSON; an OpenAI client sends the model's `arguments` string as it was.
    `canonical`: the next call's arguments are re-serialised (`canonical_tool_args`)."""
    if wire != "anthropic" and not canonical:
        return answer
    return replace(answer, content=tuple(_compact(p, wire, canonical) for p in answer.content))


def _compact(part: ContentPart, wire: WireFormat, canonical: bool) -> ContentPart:
    if not isinstance(part, ToolUsePart):
        return part
    if wire == "openai":  # canonical: as cachekeys re-serialises the echoed arguments string
        return replace(part, arguments_json=canonical_arguments(part.arguments_json))
    option = orjson.OPT_SORT_KEYS if canonical else 0
    try:
        value = orjson.loads(part.arguments_json)
        return replace(part, arguments_json=orjson.dumps(value, option=option).decode())
    except orjson.JSONDecodeError:  # a broken stream's partial arguments: keep them as produced
        return part
