"""The routing decision: which replica or provider API serves one call, and why.

`choose` is pure (no I/O, no clock, no global state): the fleet snapshot, session table,
prices, tenant knobs, time and randomness all come in as arguments, so every decision can be
replayed and tested. The stateful fleet that feeds it lives in `gateway/fleet/routing_port.py`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from routing.types import (
    ApiState,
    CandidateScore,
    Decision,
    FleetSnapshot,
    NoRouteAvailable,
    PickInputs,
    Prices,
    ReplicaPicker,
    ReplicaState,
    RequestFeatures,
    RoutingKnobs,
    SessionEntry,
    SessionTable,
    VenueKind,
    replica_key,
)

__all__ = ["admission_wait_s", "choose", "lantern_pick", "session_after", "replica_key"]


def admission_wait_s(r: ReplicaState, new_blocks: int) -> float:
    """Predicted wait before the engine admits a call needing `new_blocks` of fresh KV: none
    while they fit in the free KV, else one admission interval for each request queued ahead
    and one for itself. Without a KV signal, one interval per queued request; with no engine
    signal at all (queue 0, free KV unknown), 0."""
    if r.kv_free_blocks is None:
        blocked = r.queue_depth
    else:
        blocked = r.queue_depth + 1 if new_blocks > r.kv_free_blocks else 0
    return blocked * r.admit_interval_s


def _replica_score(r: ReplicaState, f: RequestFeatures, snap: FleetSnapshot) -> CandidateScore:
    """Predicted cached tokens and TTFT: the admission wait, queued prefill work, and our own
    uncached prefill. (A router-side KV-overflow term was tried and did not help; the
    admission wait uses the engine's own queue and KV signal instead; docs/routing.md.)
    Also what the call costs the others there: the delay its uncached prefill adds to every
    call in flight there (chunked prefill shares their steps), and the KV room left once the
    live sessions' blocks and its own new ones are counted."""
    matched = snap.prefixes.matched_blocks(r.key, f.prefix_hashes)
    cached = min(matched * f.block_tokens, max(f.prompt_tokens - 1, 0))
    uncached = f.prompt_tokens - cached
    # fresh KV: the uncached prompt and the answer (counting the whole prompt, which the engine
    # also re-pins when no running request holds its prefix, broke stickiness too often)
    new_blocks = -(-(uncached + f.max_tokens) // f.block_tokens)
    wait = admission_wait_s(r, new_blocks)
    queued = r.inflight_tokens + uncached
    ttft = r.base_ttft_s + wait + queued / r.prefill_tok_s
    stall = r.inflight_requests * uncached / r.prefill_tok_s
    learned = r.learned_tok_s if r.learned_tok_s is not None else r.prefill_tok_s
    unfinished = max(
        (queued + r.inflight_requests * uncached) * (1 / r.prefill_tok_s - 1 / learned), 0.0
    )
    return CandidateScore(
        r.backend,
        r.key,
        "selfhost",
        True,
        cached,
        ttft,
        0.0,
        admission_wait_s=wait,
        # every call in flight there: those running now, and those queued ahead of it, which
        # the engine admits first, so they are running while its prefill shares their steps
        stall_s=stall,
        unfinished_s=unfinished,
        room_blocks=r.kv_capacity_blocks - r.live_blocks - new_blocks,
        free_slots=r.free_slots,
    )


def _api_score(
    a: ApiState, f: RequestFeatures, prices: Prices, entry: SessionEntry | None
) -> CandidateScore:
    warm = entry is not None and entry.venue == "api" and entry.backend == a.backend
    cached = min(entry.cached_tokens, f.prompt_tokens) if warm and entry is not None else 0
    price = prices.api.get(a.backend)
    usd = price.request_usd(f.prompt_tokens, cached, f.max_tokens) if price else 0.0
    return CandidateScore(a.backend, None, "api", True, cached, 0.0, usd, "warm" if warm else "")


def _longest_match(
    candidates: Sequence[int], scores: Sequence[CandidateScore], ttft: Sequence[float]
) -> int:
    """The candidate with the most predicted cached tokens; ties: least `ttft`, then order."""
    return min(candidates, key=lambda i: (-scores[i].predicted_cached_tokens, ttft[i], i))


def lantern_pick(inputs: PickInputs) -> tuple[int, str]:
    """The longest match among replicas within `affinity_slack_s` of the least predicted TTFT
    less the admission wait (ties: least TTFT, then order); a session stays on its replica until staying costs more
    than the gate in predicted TTFT plus the stall its prefill inflicts on the calls in flight
    where it goes (a move recomputes the whole context next to them; counting only the mover's
    own TTFT let break-aways raise everyone's KV hold time until the fleet thrashed).

    New sessions and forks go only where the live sessions' blocks leave room for theirs,
    while any replica has room (a fork then spills off a full parent replica instead of
    evicting the blocks its neighbours are about to reuse).

    Placement and stickiness weigh prefix, queued prefill and the stall, not the engine's
    admission wait: a wait clears as calls finish, while a move to escape it recomputes the
    session's whole context for good, and moves driven by a sampled wait herded sessions
    between blocked replicas until the fleet thrashed (docs/bench/fleet_sim.md). The wait stays in each candidate's predicted
    TTFT, where the venue reads it: under `cheapest` a pick past `ttft_slo_s` moves to a
    replica within it, or overflows to an API when none is (`choose`).

    For the same reason stickiness weighs queued prefill at the learned rate, not at the cap
    that unfinished calls put on it (`unfinished_s`): a call in flight without a first token
    (a non-streamed one is in that state until it ends) says nothing of its neighbour's
    replica, which then looked faster, and sessions left their cache for it whenever their
    own replica had the older call in flight (tests/e2e/test_scaleout_engines.py). New
    sessions are placed on the capped rate, so a first burst still spreads."""
    subset, scores, sticky, knobs = inputs.subset, inputs.scores, inputs.sticky, inputs.knobs
    rng = inputs.rng
    ttft = [s.predicted_ttft_s - s.admission_wait_s for s in scores]
    if sticky is None:
        subset = [i for i in subset if scores[i].room_blocks >= 0] or subset
    fastest = min(ttft[i] for i in subset)
    near = [i for i in subset if ttft[i] <= fastest + knobs.affinity_slack_s]
    best = _longest_match(near, scores, ttft)
    if sticky is not None and sticky in subset:
        stay, move = scores[sticky], scores[best]
        penalty = ttft[sticky] + stay.stall_s - stay.unfinished_s
        penalty -= ttft[best] + move.stall_s - move.unfinished_s
        if penalty <= knobs.stickiness_gate_s:
            return sticky, "sticky"
        return best, "sticky_broken_gate"
    if sticky is None and knobs.exploration > 0 and rng.random() < knobs.exploration:
        return rng.choice(list(subset)), "explore"
    return best, "prefix_match" if scores[best].predicted_cached_tokens > 0 else "least_ttft"


def _pick_api(scores: Sequence[CandidateScore], knobs: RoutingKnobs) -> tuple[int, str]:
    """Stay on the provider holding the warm cache unless another is cheaper by the margin."""
    cheapest = min(range(len(scores)), key=lambda i: (scores[i].predicted_usd, i))
    warm = next((i for i, s in enumerate(scores) if s.note == "warm"), None)
    if warm is None:
        return cheapest, "api_cheapest"
    if scores[cheapest].predicted_usd < scores[warm].predicted_usd * (1 - knobs.provider_margin):
        return cheapest, "provider_cheaper"
    return warm, "provider_warm"


def _has_room(s: CandidateScore, r: ReplicaState, util_limit: float, knobs: RoutingKnobs) -> bool:
    return r.utilisation < util_limit and s.predicted_ttft_s <= knobs.ttft_slo_s


def _venue(
    replicas: Sequence[ReplicaState],
    rscores: Sequence[CandidateScore],
    entry: SessionEntry | None,
    knobs: RoutingKnobs,
    have_api: bool,
) -> tuple[VenueKind, list[int], str]:
    """Which venue, and which replicas may take the call if it is the fleet (hysteresis)."""
    everyone = list(range(len(replicas)))
    if not have_api:
        return "selfhost", everyone, ""
    if not replicas:
        return "api", [], ""
    if knobs.venue == "cheapest" and entry is not None and entry.venue == "selfhost":
        # an affine fleet session keeps the fleet while its pick meets the TTFT bound
        return "selfhost", everyone, "overflow_ttft_slo"
    if entry is not None and entry.venue == "api":
        limit, note = knobs.headroom_util - knobs.venue_hysteresis, "return_to_fleet"
    else:
        limit, note = knobs.headroom_util, ""
    room = [i for i in everyone if _has_room(rscores[i], replicas[i], limit, knobs)]
    if room:
        return "selfhost", room, note
    return "api", [], "overflow_headroom" if entry is None or entry.venue != "api" else ""


def _excluded(r: ReplicaState, venue: str) -> CandidateScore:
    if venue == "api_only":
        note = "venue api_only"
    elif not r.healthy:
        note = "unhealthy"
    else:
        note = f"drained until {r.drained_until:g}"
    return CandidateScore(r.backend, r.key, "selfhost", False, note=note)


def choose(
    features: RequestFeatures,
    fleet: FleetSnapshot,
    sessions: SessionTable,
    prices: Prices,
    policy: RoutingKnobs,
    now: float,
    rng: random.Random,
    picker: ReplicaPicker = lantern_pick,
) -> Decision:
    """Pick the venue, replica or provider for one call; raise NoRouteAvailable if none may.
    `picker` chooses among the replicas the venue allows (Lantern's own by default)."""
    pool = [r for r in fleet.replicas if r.model == features.model]
    replicas = [r for r in pool if r.is_available(now)] if policy.venue != "api_only" else []
    apis = [a for a in fleet.apis if a.model == features.model and a.is_available(now)]
    if policy.venue == "selfhost_only":
        apis = []
    if not replicas and not apis:
        return _panic(features, fleet, policy)
    entry = sessions.fresh(features.session_id, now, policy.session_ttl_s)
    rscores = [_replica_score(r, features, fleet) for r in replicas]
    ascores = [_api_score(a, features, prices, entry) for a in apis]
    keys = [r.key for r in replicas]
    sticky = keys.index(entry.replica) if entry and entry.replica in keys else None
    venue, subset, note = _venue(replicas, rscores, entry, policy, bool(apis))
    chosen: CandidateScore
    if venue == "selfhost":
        inputs = PickInputs(subset, replicas, rscores, features, sticky, fleet.seq, policy, rng)
        i, reason = _with_free_slot(picker, inputs, picker(inputs))
        chosen = rscores[i]
        if note == "overflow_ttft_slo" and chosen.predicted_ttft_s > policy.ttft_slo_s:
            # past the bound where the pick stands (its queue included): another replica that
            # meets it costs a recompute on hardware already paid for; only with none, an API
            within = [k for k in subset if rscores[k].predicted_ttft_s <= policy.ttft_slo_s]
            if within:
                ttft = [s.predicted_ttft_s for s in rscores]
                chosen, reason = rscores[_longest_match(within, rscores, ttft)], "ttft_slo_move"
            else:
                j, api_reason = _pick_api(ascores, policy)
                chosen, reason = ascores[j], f"{note}:{api_reason}"
        elif note and note != "overflow_ttft_slo":
            reason = f"{note}:{reason}"
    else:
        j, reason = _pick_api(ascores, policy)
        chosen = ascores[j]
        reason = f"{note}:{reason}" if note else reason
    excluded = [_excluded(r, policy.venue) for r in pool if r.key not in keys]
    return Decision(
        backend=chosen.backend,
        replica=chosen.replica,
        venue=chosen.venue,
        reason=reason,
        predicted_cached_tokens=chosen.predicted_cached_tokens,
        predicted_ttft_s=chosen.predicted_ttft_s,
        scores=tuple(rscores) + tuple(ascores) + tuple(excluded),
        fallbacks=_fallbacks(chosen, rscores, ascores),
    )


def _is_full(s: CandidateScore) -> bool:
    return s.free_slots is not None and s.free_slots <= 0


def _with_free_slot(
    picker: ReplicaPicker, inputs: PickInputs, pick: tuple[int, str]
) -> tuple[int, str]:
    """A pick whose replica has no free batch slot, when a sibling has one: the same picker
    among the siblings with a slot (reason `slot_free`), rather than a queue in the gateway.
    A session's own replica keeps it (`sticky`): its cached context is worth a short wait,
    which the tenant's `max_queue_ms` bounds."""
    i, reason = pick
    if reason == "sticky" or not _is_full(inputs.scores[i]):
        return pick
    free = [k for k in inputs.subset if not _is_full(inputs.scores[k])]
    if not free:
        return pick
    j, _ = picker(replace(inputs, subset=free, sticky=None))
    return j, "slot_free"


def _panic(features: RequestFeatures, fleet: FleetSnapshot, policy: RoutingKnobs) -> Decision:
    """Every candidate the venue allows looks unhealthy: rather than answer 503 for all (a
    transient fault of the only replica would refuse every tenant for the whole cool-down),
    send the call to the one most likely to answer, the one whose cool-down ends first (the
    earliest drained), as Envoy does below its healthy-panic threshold. Its answer brings it
    back. NoRouteAvailable only when the model has no candidate the venue allows at all."""
    scores: list[tuple[float, CandidateScore]] = []
    if policy.venue != "api_only":
        for r in fleet.replicas:
            if r.model == features.model:
                score = _replica_score(r, features, fleet)
                scores.append((r.drained_until, replace(score, note="panic")))
    if policy.venue != "selfhost_only":
        for a in fleet.apis:
            if a.model == features.model:
                score = CandidateScore(a.backend, None, "api", True, note="panic")
                scores.append((a.cooldown_until, score))
    if not scores:
        raise NoRouteAvailable(features.model, policy.venue)
    ordered = [s for _, s in sorted(scores, key=lambda p: p[0])]
    chosen = ordered[0]
    return Decision(
        backend=chosen.backend,
        replica=chosen.replica,
        venue=chosen.venue,
        reason="panic",
        predicted_cached_tokens=chosen.predicted_cached_tokens,
        predicted_ttft_s=chosen.predicted_ttft_s,
        scores=tuple(ordered),
        fallbacks=tuple(ordered[1:]),
    )


def _fallbacks(
    chosen: CandidateScore,
    rscores: Sequence[CandidateScore],
    ascores: Sequence[CandidateScore],
) -> tuple[CandidateScore, ...]:
    """The rest of the chain: same venue first (replicas with a free slot before full ones, each
    fastest first; cheapest APIs), then the other."""
    others = (s for s in rscores if s is not chosen)
    fleet = sorted(others, key=lambda s: (_is_full(s), s.predicted_ttft_s))
    api = sorted((s for s in ascores if s is not chosen), key=lambda s: s.predicted_usd)
    order = fleet + api if chosen.venue == "selfhost" else api + fleet
    return tuple(order)


def session_after(
    session_id: str,
    venue: VenueKind,
    backend: str,
    replica: str | None,
    now: float,
    prompt_tokens: int,
    output_tokens: int,
) -> SessionEntry:
    """The session's entry once a call succeeded: the venue now holds prompt and answer."""
    return SessionEntry(session_id, venue, backend, replica, now, prompt_tokens + output_tokens)
