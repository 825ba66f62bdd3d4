"""The learned prefill rate: the estimator on given samples, and the fleet's TTFT prediction
moving after streamed and short non-streamed calls (a pinned rate does not move)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from adapters.types import Usage
from gateway.core.models_table import RoutePricing, fleet_inputs
from gateway.fleet.rate import MAX_TOK_S, PrefillRate
from gateway.fleet.routing_port import Fleet, ReplicaSpec
from gateway.ports import Candidate, ModelRoute, RoutePlan
from gateway.settings import load_settings
from policies.model import TenantPolicy
from policies.routing import RoutingPolicy
from tests.gateway.fleet_reference import FullDecisionFleet
from tests.routing.test_router_fleet import Clock, ProbeBackend, chain, prepared

TENANT = TenantPolicy(tenant="acme", routing=RoutingPolicy(venue="selfhost_only"))


def test_estimator_is_a_token_weighted_moving_ratio_from_the_configured_start() -> None:
    rate = PrefillRate(2000.0)  # 2000 tokens in 1.0 s of prior evidence
    assert rate.tok_s == 2000.0
    assert rate.observe(500, 1.0)
    assert rate.tok_s == pytest.approx((0.8 * 2000 + 500) / (0.8 * 1.0 + 1.0), rel=1e-12)
    assert rate.observe(1500, 1.5)
    tokens, seconds = 0.8 * 2100 + 1500, 0.8 * 1.8 + 1.5
    assert rate.tok_s == pytest.approx(tokens / seconds, rel=1e-12)
    # too short a prefill, or no time left after the fixed cost: no sample
    assert not rate.observe(31, 0.1)
    assert not rate.observe(500, 0.0)
    assert not rate.observe(500, -0.2)
    assert rate.num_samples == 2
    assert rate.tok_s == pytest.approx(tokens / seconds, rel=1e-12)


def test_estimator_clamps_samples_and_result_and_a_pinned_rate_never_moves() -> None:
    stalled = PrefillRate(2000.0)
    stalled.observe(1000, 1000.0)  # read as 1000 tokens in 20 s (50 tok/s), not 1 tok/s
    assert stalled.tok_s == (1600.0 + 1000) / (0.8 + 20.0)
    fast = PrefillRate(2000.0)
    fast.observe(10_000, 1e-9)  # read as 10,000 tokens in 0.05 s (the ceiling)
    assert fast.tok_s == (1600.0 + 10_000) / (0.8 + 10_000 / MAX_TOK_S)
    assert PrefillRate(1e6).tok_s == MAX_TOK_S  # a configured start past the range too
    pinned = PrefillRate(500.0, pinned=True)
    assert not pinned.observe(1000, 10.0)
    assert (pinned.tok_s, pinned.num_samples) == (500.0, 0)


def build(spec: ReplicaSpec, clock: Clock) -> tuple[Fleet, ModelRoute]:
    route = ModelRoute(
        "smollm2", (Candidate(ProbeBackend("a"), "local", "selfhost", "http://a/v1"),)
    )
    fleet = FullDecisionFleet([route], clock=clock, rng=random.Random(1), specs={"local": spec})
    return fleet, route


def call(fleet: Fleet, route: ModelRoute, sid: str, prompt: int, max_tokens: int) -> RoutePlan:
    h = chain(sid, prompt // 16)
    plan = fleet.plan(route, TENANT, sid, prepared(h), prompt, max_tokens)
    fleet.on_dispatch(plan.attempts[0], sid, prepared(h))
    return plan


def rate_of(fleet: Fleet) -> float:
    return fleet.stats().replicas[0].prefill_tok_s


def test_fleet_learns_the_rate_from_first_tokens_and_short_non_streamed_calls() -> None:
    clock = Clock()
    spec = ReplicaSpec(prefill_tok_s=2000.0, base_ttft_s=0.05, metrics_path=None)
    fleet, route = build(spec, clock)
    first = call(fleet, route, "s1", 1600, 8)
    assert first.details["predicted_ttft_ms"] == 50.0 + 800.0  # 1600 tokens at 2000 tok/s
    # a second call queued behind the first: both prefills counted in its sample
    second = call(fleet, route, "s2", 800, 8)
    assert second.details["predicted_ttft_ms"] == 50.0 + 1200.0
    clock.now += 2.05
    fleet.on_first_token(first.attempts[0])  # 1600 tokens in 2.0 s past the fixed cost
    learned = (1600.0 + 1600) / (0.8 + 2.0)
    assert rate_of(fleet) == pytest.approx(learned, rel=1e-12)
    fleet.on_first_token(first.attempts[0])  # a repeat is no second sample
    assert rate_of(fleet) == pytest.approx(learned, rel=1e-12)
    clock.now += 1.0
    fleet.on_first_token(second.attempts[0])  # 1600 + 800 queued at its dispatch, 3.0 s
    tokens, seconds = 0.8 * 3200 + 2400, 0.8 * 2.8 + 3.0
    assert rate_of(fleet) == pytest.approx(tokens / seconds, rel=1e-12)
    fleet.on_complete(first.attempts[0], Usage(1600, 8), ok=True)
    fleet.on_complete(second.attempts[0], Usage(800, 8), ok=True)
    # the prediction moved: 800 new tokens at the learned rate
    third = call(fleet, route, "s3", 800, 4)
    assert third.details["predicted_ttft_ms"] == round((0.05 + 800 * seconds / tokens) * 1000, 1)
    # non-streamed with a 4-token answer: the whole call (less the fixed cost) is the sample
    clock.now += 1.05
    fleet.on_complete(third.attempts[0], Usage(800, 4), ok=True)
    tokens, seconds = 0.8 * tokens + 800, 0.8 * seconds + 1.0
    assert rate_of(fleet) == pytest.approx(tokens / seconds, rel=1e-12)
    # a long answer's latency is mostly decode: no sample; nor is a failed call
    long = call(fleet, route, "s4", 800, 200)
    clock.now += 9.0
    fleet.on_complete(long.attempts[0], Usage(800, 200), ok=True)
    failed = call(fleet, route, "s5", 800, 4)
    clock.now += 9.0
    fleet.on_complete(failed.attempts[0], Usage(800, 0), ok=False)
    assert rate_of(fleet) == pytest.approx(tokens / seconds, rel=1e-12)


def test_a_pinned_rate_is_honoured() -> None:
    clock = Clock()
    spec = ReplicaSpec(prefill_tok_s=500.0, prefill_pinned=True, metrics_path=None)
    fleet, route = build(spec, clock)
    first = call(fleet, route, "s1", 1600, 8)
    clock.now += 10.0
    fleet.on_first_token(first.attempts[0])
    fleet.on_complete(first.attempts[0], Usage(1600, 8), ok=True)
    assert rate_of(fleet) == 500.0
    assert call(fleet, route, "s2", 800, 8).details["predicted_ttft_ms"] == 50.0 + 1600.0


def test_config_pins_every_backends_rate_or_leaves_it_to_be_learned(tmp_path: Path) -> None:
    path = tmp_path / "lantern.yaml"
    backend = "{kind: selfhost, name: engine, base_url: 'http://a/v1', model: m"
    for pin, rate in ((True, "500"), (False, "null")):
        path.write_text(
            f"fleet: {{pin_prefill_tok_s: {str(pin).lower()}}}\n"
            f"models:\n  - name: m\n    backends:\n      - {backend}, prefill_tok_s: {rate}}}\n"
        )
        _, specs = fleet_inputs(load_settings(path), RoutePricing({}))
        start = 500.0 if pin else 2000.0
        assert specs["engine"] == ReplicaSpec(prefill_tok_s=start, prefill_pinned=pin)


def test_unfinished_prefills_cap_the_rate_before_any_sample() -> None:
    clock = Clock()
    spec = ReplicaSpec(prefill_tok_s=2000.0, base_ttft_s=0.05, metrics_path=None)
    fleet, route = build(spec, clock)
    first = call(fleet, route, "s1", 1600, 4)
    clock.now += 0.45  # 1600 tokens not done in 0.4 s: no news at 2000 tok/s (0.8 s)
    assert rate_of(fleet) == 2000.0
    clock.now += 1.6  # still no answer after 2.0 s past the fixed cost: at most 800 tok/s
    assert rate_of(fleet) == pytest.approx(800.0)
    second = call(fleet, route, "s2", 800, 4)  # predicted at the capped rate: 2400 queued
    assert second.details["predicted_ttft_ms"] == pytest.approx(50.0 + 2400 / 800 * 1000)
    assert fleet.snapshot(clock.now).replicas[0].prefill_tok_s == pytest.approx(800.0)
    clock.now += 0.5
    fleet.on_complete(first.attempts[0], Usage(1600, 4), ok=True)  # the sample: 1600 in 2.5 s
    learned = (1600.0 + 1600) / (0.8 + 2.5)
    # the second call (2400 queued at its dispatch 0.5 s ago) caps nothing yet
    assert rate_of(fleet) == pytest.approx(learned, rel=1e-12)
    clock.now += 3.0  # 2400 tokens unfinished after 3.45 s: the cap is 696 tok/s
    assert rate_of(fleet) == pytest.approx(2400 / 3.45)
    # what stickiness weighs: the learned rate, without the cap
    assert fleet.snapshot(clock.now).replicas[0].learned_tok_s == pytest.approx(learned)
    fleet.on_complete(second.attempts[0], Usage(800, 4), ok=True)
    assert fleet.stats().replicas[0].prefill_tok_s < learned  # the slow sample was learned


def test_long_answers_and_a_pinned_rate_are_not_capped() -> None:
    clock = Clock()
    fleet, route = build(ReplicaSpec(prefill_tok_s=2000.0, metrics_path=None), clock)
    call(fleet, route, "s1", 1600, 200)  # may be non-streamed: its wait is mostly decode
    clock.now += 10.0
    assert rate_of(fleet) == 2000.0
    pinned, route = build(ReplicaSpec(500.0, prefill_pinned=True, metrics_path=None), clock)
    call(pinned, route, "s1", 1600, 4)
    clock.now += 10.0
    assert rate_of(pinned) == 500.0


def test_the_cap_keeps_the_rate_in_range() -> None:
    rate = PrefillRate(2000.0)
    assert rate.capped([(1000, 100.0)]) == 50.0  # a stalled engine: the floor
    assert rate.capped([(10, 100.0), (1000, 0.0), (1000, -1.0)]) == 2000.0  # no evidence
    assert rate.capped([(1000, 1.0), (1000, 2.0)]) == 500.0  # the tightest cap wins


def test_a_replica_without_samples_starts_from_its_siblings_learned_rate() -> None:
    """Issue 6 end to end: a fresh replica at the configured 2000 tok/s looked 10x faster than
    its sibling that had learned ~200 and drew every session at once; it starts from the
    slowest rate the backend's other replicas learned, until it has a sample of its own."""
    clock = Clock()
    spec = ReplicaSpec(prefill_tok_s=2000.0, base_ttft_s=0.05, metrics_path=None)
    backend = ProbeBackend("a")
    route = ModelRoute(
        "smollm2",
        tuple(Candidate(backend, "local", "selfhost", f"http://{h}/v1") for h in ("a", "b", "c")),
    )
    fleet = FullDecisionFleet([route], clock=clock, rng=random.Random(1), specs={"local": spec})

    def rates() -> dict[str, float]:
        return {str(r.url): r.prefill_tok_s for r in fleet.snapshot(clock.now).replicas}

    assert set(rates().values()) == {2000.0}  # no sample anywhere: the configured start
    learned: dict[str, PrefillRate] = {}
    for sid, prompt, seconds in (("s1", 1600, 8.05), ("s2", 3200, 8.05)):
        plan = call(fleet, route, sid, prompt, 4)
        replica = str(plan.attempts[0].candidate.replica)
        clock.now += seconds
        fleet.on_first_token(plan.attempts[0])
        fleet.on_complete(plan.attempts[0], Usage(prompt, 4), ok=True)
        # what that replica alone has seen (the calls run one after another: nothing queued)
        learned.setdefault(replica, PrefillRate(2000.0)).observe(prompt, seconds - 0.05)
    own = {replica: rate.tok_s for replica, rate in learned.items()}
    slowest = min(own.values())
    assert slowest < 2000.0
    now = rates()
    for replica, rate in now.items():
        assert rate == pytest.approx(own.get(replica, slowest), rel=1e-12)
    assert len(own) < 3  # at least one replica is still without a sample
