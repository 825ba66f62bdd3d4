"""The session memory `observe` leaves for after the reply (the tracker's and the autopilot's):
whenever it is written, each call sees what it would if every call before it had been written
as it was observed, also calls of one session in flight together and at the tables' bound."""

from __future__ import annotations

import random

from adapters.types import Usage
from cachekeys.diagnosis import CacheDiagnosis, Reason, block_names
from cachekeys.keys import head_tokens
from cachekeys.normalise import Edits
from gateway.core.cache_diagnosis import CacheReport
from gateway.core.prompt_cache import PromptCachePort
from gateway.core.prompt_prepare import PromptFacts
from tests.cachekeys.test_gateway_prompt_cache import (
    ENCODER,
    SECRET,
    Clock,
    anthropic_body,
    prepare,
    tenant,
)

POLICIES = (
    tenant("acme", normalise={"relocate_volatile": "auto"}),
    tenant("globex"),
)
SYSTEMS = ("Follow the rules." + " rule" * 1200, "Now 2026-11-30T10:00:00Z." + " r" * 1100)


def _run(steps: list[tuple[int, str, int, int, bool]], max_sessions: int) -> list[object]:
    """Both ports see the same calls; `reference` writes each call's memory at once, `port`
    only where the step says its reply is out (and otherwise when a read needs it)."""
    clock = Clock()
    reference = PromptCachePort(SECRET, encoder=ENCODER, clock=clock, max_sessions=max_sessions)
    port = PromptCachePort(SECRET, encoder=ENCODER, clock=clock, max_sessions=max_sessions)
    seen: list[object] = []
    for who, session, turns, system, replied in steps:
        clock.now_s += 7
        policy, body = POLICIES[who], anthropic_body(turns, system=SYSTEMS[system])
        want = reference.observe(policy, session, prepare(reference, body, policy))
        reference.reconcile(want, Usage())
        got = port.observe(policy, session, prepare(port, body, policy))
        assert got == want
        if replied:
            port.reconcile(got, Usage())
        seen.append(got.header)
    for who, policy in enumerate(POLICIES):
        name = policy.tenant
        assert port.tracker.num_entries(name) == reference.tracker.num_entries(name), who
        assert port.autopilot.sessions.num_entries(name) == (
            reference.autopilot.sessions.num_entries(name)
        )
    assert len(port.tracker) == len(reference.tracker)
    return seen


def test_calls_in_flight_see_the_calls_admitted_before_them() -> None:
    # three calls of one session admitted before any reply, then their replies
    steps = [
        (0, "s", 1, 0, False),
        (0, "s", 2, 0, False),
        (0, "s", 3, 1, False),
        (0, "s", 4, 1, True),
        (0, "s", 5, 1, True),
    ]
    headers = _run(steps, max_sessions=100)
    assert [str(h).split(";")[0] for h in headers] == [
        "first_call",
        "kept",
        "system_changed",
        "kept",
        "kept",
    ]


def test_any_order_of_replies_reads_the_same_at_the_bound() -> None:
    rng = random.Random(7)
    steps = [
        (
            rng.randrange(2),
            rng.choice("abcd"),
            rng.randrange(1, 4),
            rng.randrange(2),
            rng.random() < 0.4,
        )
        for _ in range(60)
    ]
    _run(steps, max_sessions=3)  # past the bound: entries are evicted as written at once


def test_verdict_parts_are_the_header_and_the_object() -> None:
    diagnoses = [
        CacheDiagnosis(Reason.FIRST_CALL, False, 1200, 0, 0),
        CacheDiagnosis(Reason.KEPT, True, 1300, 1200, 1200, None, 12.34567),
        CacheDiagnosis(Reason.SYSTEM_CHANGED, False, 1300, 1200, 0, "system[0]", 3.0),
        CacheDiagnosis(Reason.VOLATILE_BLOCK, False, 9, 8, 7, "tools[1]", 0.5, "iso_datetime"),
    ]
    edits = [Edits(), Edits(("iso_datetime", "uuid"), 0), Edits((), 2), Edits(("uuid",), 3)]
    for d in diagnoses:
        for e in edits:
            report = CacheReport("acme", "s", 4, d, e)
            header, body = report.verdict_parts()
            assert header == reference_header(report)
            assert list(body.items()) == list(reference_dict(report).items())  # key order too
            assert (report.header_value(), report.as_dict()) == (header, body)


def reference_header(report: CacheReport) -> str:
    """The header as it was built part by part before `verdict_parts` (the oracle)."""
    d, edits = report.diagnosis, report.edits
    parts = [d.reason.value]
    if d.first_changed:
        parts.append(f"block={d.first_changed}")
    if d.reason == Reason.VOLATILE_BLOCK:
        parts += [f"pattern={d.pattern}", "advice=relocate_volatile"]
    if edits.relocated:
        parts.append("relocated=" + ",".join(edits.relocated))
    if edits.num_tool_args:
        parts.append(f"tool_args={edits.num_tool_args}")
    parts += [
        f"prefix={d.stable_prefix_tokens}",
        f"expected={d.expected_prefix_tokens}",
        f"read={d.predicted_read_tokens}",
    ]
    return "; ".join(parts)


def reference_dict(report: CacheReport) -> dict[str, object]:
    """The ledger JSON's object as it was built before `verdict_parts` (the oracle)."""
    body: dict[str, object] = {
        "call": report.call_index,
        "tenant": report.tenant,
        **report.diagnosis.as_dict(),
    }
    if report.edits != Edits():
        body["autopilot"] = {
            "relocated": list(report.edits.relocated),
            "tool_args": report.edits.num_tool_args,
        }
    gap_s = report.diagnosis.gap_s
    body["gap_s"] = None if gap_s is None else round(gap_s, 3)
    return body


def test_block_names_are_the_blocks_names() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    policy = POLICIES[1]
    for turns in (1, 3, 2):
        facts = prepare(port, anthropic_body(turns), policy).diagnosis
        assert isinstance(facts, PromptFacts) and facts.layout is not None
        blocks = facts.layout.blocks
        assert block_names(blocks) == tuple(b.name for b in blocks)


def test_head_tokens_of_the_fingerprint_are_the_layouts() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    policy = tenant("acme", normalise={"relocate_volatile": True})
    bodies = [anthropic_body(t, system=s) for t in (1, 2, 4) for s in SYSTEMS]
    bodies.append({**anthropic_body(1), "tools": []})
    bodies.append({**anthropic_body(2), "system": ""})
    volatile = 0
    for body in bodies:
        facts = prepare(port, body, policy).diagnosis
        assert isinstance(facts, PromptFacts) and facts.layout is not None
        volatile += any(b.is_volatile for b in facts.layout.blocks)
        assert facts.fingerprint.head_tokens() == head_tokens(facts.layout)
    assert volatile  # relocated tails among them
