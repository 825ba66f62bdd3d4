"""The data the router decides on and the decision it returns: frozen values and two read-only
protocols (prefix lookups and routing knobs). No behaviour beyond small derived values.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from adapters.errors import AdapterError
from adapters.records import slot_init

VenueKind = Literal["selfhost", "api"]


def replica_key(backend: str, url: str | None) -> str:
    """The identity of one self-hosted replica: backend name, plus its URL when it has one."""
    return backend if url is None else f"{backend}@{url}"


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    tenant: str
    session_id: str
    model: str
    prefix_hashes: tuple[bytes, ...]  # chained hashes of the rendered prompt's full blocks
    prompt_tokens: int
    max_tokens: int
    block_tokens: int = 16  # tokens per prefix block (the cachekeys scheme)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One self-hosted replica as the fleet sees it right now (router-side accounting)."""

    backend: str
    url: str | None
    model: str
    healthy: bool = True
    drained_until: float = 0.0  # clock seconds; drained while now < drained_until
    inflight_requests: int = 0
    inflight_tokens: int = 0  # uncached prompt tokens still to prefill, dispatched here
    inflight_blocks: int = 0  # KV blocks the in-flight requests pin (prompt + max output)
    queue_depth: int = 0  # requests waiting for admission (engine-reported, brought up to date)
    prefill_tok_s: float = 2000.0  # prefill throughput, for the TTFT prediction
    capacity_tok_s: float = 1000.0  # work tokens/s at full use (break-even capacity)
    kv_capacity_blocks: int = 4096
    utilisation: float = 0.0  # recent work tokens/s over capacity_tok_s
    base_ttft_s: float = 0.05  # one decode step plus transport
    kv_free_blocks: int | None = None  # engine-reported free KV, brought up to date; None: unknown
    admit_interval_s: float = 0.0  # seconds per admission while admission-bound (1 / completions)
    signal_age_s: float | None = None  # age of the engine's load sample; None: none in use
    live_blocks: int = 0  # distinct cached blocks touched recently: live sessions' working set
    # the rate learned from finished prefills, before the cap that calls still in flight
    # without a first token put on it (`prefill_tok_s`); None: the same as `prefill_tok_s`
    learned_tok_s: float | None = None
    # batch slots free for a new call (capacity less the calls holding or waiting for one);
    # None: no capacity known (unbounded)
    free_slots: int | None = None

    @property
    def key(self) -> str:
        return replica_key(self.backend, self.url)

    def is_available(self, now: float) -> bool:
        return self.healthy and now >= self.drained_until


@dataclass(frozen=True, slots=True)
class ApiState:
    """One provider API that serves the model (Bedrock, or another provider via litellm)."""

    backend: str
    model: str
    healthy: bool = True
    cooldown_until: float = 0.0

    def is_available(self, now: float) -> bool:
        return self.healthy and now >= self.cooldown_until


class PrefixView(Protocol):
    """Read-only lookup into the approximate per-replica block index."""

    def matched_blocks(self, replica: str, hashes: tuple[bytes, ...]) -> int: ...


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    replicas: tuple[ReplicaState, ...]
    apis: tuple[ApiState, ...]
    prefixes: PrefixView
    seq: int = 0  # request sequence number (round-robin position)


@slot_init
@dataclass(frozen=True, slots=True)
class SessionEntry:
    session_id: str
    venue: VenueKind
    backend: str
    replica: str | None  # replica key for self-hosted venues
    last_seen: float
    cached_tokens: int = 0  # tokens the venue holds for this session (prompt + answer)


@dataclass(frozen=True, slots=True)
class SessionTable:
    """An immutable view of session → venue; the fleet owns the mutable store behind it."""

    entries: Mapping[str, SessionEntry] = field(default_factory=dict)

    def fresh(self, session_id: str, now: float, ttl_s: float) -> SessionEntry | None:
        entry = self.entries.get(session_id)
        if entry is None or now - entry.last_seen > ttl_s:
            return None
        return entry


@dataclass(frozen=True, slots=True)
class TokenPrices:
    """API dollars per million tokens by kind; a zero write price means writes bill as input."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cache_read_usd_per_mtok: float = 0.0
    cache_write_usd_per_mtok: float = 0.0

    def request_usd(self, prompt_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        write = self.cache_write_usd_per_mtok or self.input_usd_per_mtok
        read = self.cache_read_usd_per_mtok or self.input_usd_per_mtok
        uncached = max(prompt_tokens - cached_tokens, 0)
        usd = cached_tokens * read + uncached * write + output_tokens * self.output_usd_per_mtok
        return usd / 1e6


@dataclass(frozen=True, slots=True)
class Prices:
    api: Mapping[str, TokenPrices] = field(default_factory=dict)  # by API backend name
    replica_usd_per_h: Mapping[str, float] = field(default_factory=dict)  # by replica backend


class RoutingKnobs(Protocol):
    """What the router reads from a tenant's `routing:` policy (policies/routing.py)."""

    @property
    def venue(self) -> str: ...
    @property
    def stickiness_gate_s(self) -> float: ...
    @property
    def affinity_slack_s(self) -> float: ...
    @property
    def headroom_util(self) -> float: ...
    @property
    def ttft_slo_s(self) -> float: ...
    @property
    def venue_hysteresis(self) -> float: ...
    @property
    def provider_margin(self) -> float: ...
    @property
    def session_ttl_s(self) -> float: ...
    @property
    def exploration(self) -> float: ...


@dataclass(frozen=True, slots=True)
class CandidateScore:
    backend: str
    replica: str | None
    venue: VenueKind
    eligible: bool
    predicted_cached_tokens: int = 0
    predicted_ttft_s: float = 0.0
    predicted_usd: float = 0.0
    note: str = ""
    admission_wait_s: float = 0.0  # the part of predicted_ttft_s spent waiting for KV / a slot
    stall_s: float = 0.0  # the delay this call's uncached prefill adds to the calls running there
    # the part of predicted_ttft_s + stall_s owed only to the cap of unfinished calls (a
    # transient reading: it clears as they report, or finish)
    unfinished_s: float = 0.0
    # KV left once the live sessions' blocks and this call's new ones are counted (< 0: the
    # call would evict blocks a live session is about to reuse)
    room_blocks: int = 0
    free_slots: int | None = None  # the replica's free batch slots; None: unbounded


@dataclass(frozen=True, slots=True)
class Decision:
    backend: str
    replica: str | None  # replica key (backend@url) for self-hosted venues
    venue: VenueKind
    reason: str
    predicted_cached_tokens: int
    predicted_ttft_s: float
    scores: tuple[CandidateScore, ...]
    fallbacks: tuple[CandidateScore, ...] = ()  # the rest of the chain, in order


class NoRouteAvailable(AdapterError):
    """No healthy candidate is allowed by the tenant's venue policy for this model."""

    def __init__(self, model: str, venue: str) -> None:
        super().__init__(f"no available backend for model {model} under venue {venue}")
        self.model = model
        self.venue = venue


@dataclass(frozen=True, slots=True)
class PickInputs:
    """What a replica picker sees: the eligible replicas (`subset`, indices into `replicas` and
    `scores`), the session's current replica (`sticky`, an index, or None), the snapshot's
    sequence number, the tenant's knobs and the injected randomness."""

    subset: Sequence[int]
    replicas: Sequence[ReplicaState]
    scores: Sequence[CandidateScore]
    features: RequestFeatures
    sticky: int | None
    seq: int
    knobs: RoutingKnobs
    rng: random.Random


class ReplicaPicker(Protocol):
    """Picks one replica of `inputs.subset` (an index into `inputs.replicas`) and says why.
    Lantern's own is `routing.decision.lantern_pick`; benchmarks inject baselines here."""

    def __call__(self, inputs: PickInputs) -> tuple[int, str]: ...
