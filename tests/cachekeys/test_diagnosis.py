"""Cache-break diagnosis: each reason, the first changed block, and the predicted cache read."""

from __future__ import annotations

from dataclasses import replace

from adapters.types import ChatRequest, Message, TextPart
from cachekeys.diagnosis import PromptFingerprint, Reason, diagnose
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.markers import plan_breakpoints
from tests.cachekeys.conftest import agent_request, tool


def fingerprint(
    request: ChatRequest, mode: str = "breakpoints", ttl_s: float = 300.0
) -> PromptFingerprint:
    layout = PromptLayout(request_blocks(request), tuple(600 for _ in request_blocks(request)))
    plan = plan_breakpoints(layout, "5m", 1024)
    return PromptFingerprint.of(layout, request.model, plan.indices, mode, ttl_s)  # type: ignore[arg-type]


FIRST = agent_request(turns=1)  # tools 0-1 (end 1200), system 2 (1800), message 3 (2400)
SECOND = agent_request(turns=2)  # ... + assistant 4, user 5 (3600)


def test_first_call() -> None:
    d = diagnose(None, None, fingerprint(FIRST), 0.0)
    assert (d.reason, d.kept, d.stable_prefix_tokens, d.predicted_read_tokens) == (
        Reason.FIRST_CALL,
        False,
        2400,
        0,
    )


def test_append_only_keeps_the_prefix() -> None:
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(SECOND), 30.0)
    assert (
        d.reason,
        d.kept,
        d.expected_prefix_tokens,
        d.predicted_read_tokens,
        d.stable_prefix_tokens,
    ) == (
        Reason.KEPT,
        True,
        2400,
        2400,
        3600,
    )
    assert d.gap_s == 30.0


def test_ttl_expired() -> None:
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(SECOND), 301.0)
    assert (d.reason, d.kept, d.predicted_read_tokens) == (Reason.TTL_EXPIRED, False, 0)


def test_tools_changed() -> None:
    more_tools = replace(SECOND, tools=(*SECOND.tools, tool("zeta")))
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(more_tools), 10.0)
    assert (d.reason, d.first_changed, d.predicted_read_tokens) == (
        Reason.TOOLS_CHANGED,
        "tools[2]",
        1200,
    )
    changed_first = replace(SECOND, tools=(tool("edit", "new text"), SECOND.tools[1]))
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(changed_first), 10.0)
    assert (d.reason, d.first_changed, d.predicted_read_tokens) == (
        Reason.TOOLS_CHANGED,
        "tools[0]",
        0,
    )


def test_system_changed() -> None:
    d = diagnose(
        fingerprint(FIRST), 0.0, fingerprint(replace(SECOND, system=(TextPart("Now 10:15"),))), 10.0
    )
    assert (d.reason, d.first_changed, d.predicted_read_tokens) == (
        Reason.SYSTEM_CHANGED,
        "system[0]",
        1200,
    )


def test_history_rewritten() -> None:
    rewritten = replace(
        SECOND,
        messages=(Message("user", (TextPart("Summary of the task."),)), *SECOND.messages[1:]),
    )
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(rewritten), 10.0)
    assert (d.reason, d.first_changed, d.predicted_read_tokens) == (
        Reason.HISTORY_REWRITTEN,
        "messages[0][0]",
        1800,
    )
    truncated = replace(SECOND, messages=())
    d = diagnose(fingerprint(FIRST), 0.0, fingerprint(truncated), 10.0)
    assert (d.reason, d.first_changed) == (Reason.HISTORY_REWRITTEN, "messages[0][0]")


def test_model_changed() -> None:
    d = diagnose(
        fingerprint(FIRST), 0.0, fingerprint(replace(SECOND, model="claude-opus-4-1")), 10.0
    )
    assert d.reason == Reason.MODEL_CHANGED


def test_automatic_mode_predicts_128_token_steps() -> None:
    d = diagnose(
        fingerprint(FIRST, mode="automatic"), 0.0, fingerprint(SECOND, mode="automatic"), 10.0
    )
    assert (d.reason, d.predicted_read_tokens) == (Reason.KEPT, 2304)  # 1024 + 10 * 128 <= 2400
    d = diagnose(
        fingerprint(FIRST, mode="automatic"),
        0.0,
        fingerprint(replace(SECOND, system=(TextPart("x"),)), mode="automatic"),
        10.0,
    )
    assert (d.reason, d.predicted_read_tokens) == (
        Reason.SYSTEM_CHANGED,
        1152,
    )  # tools: 1200 -> 1152


def test_options_changed_keeps_tools_and_system_only() -> None:
    from cachekeys.diagnosis import options_digest

    def with_options(request: ChatRequest) -> PromptFingerprint:
        fp = fingerprint(request)
        return replace(fp, options=options_digest(request))

    before = with_options(FIRST)
    after = with_options(replace(SECOND, tool_choice={"type": "any"}))
    d = diagnose(before, 0.0, after, 10.0)
    assert (d.reason, d.first_changed, d.predicted_read_tokens) == (
        Reason.OPTIONS_CHANGED,
        "messages",
        1800,
    )
    thinking = with_options(
        replace(SECOND, extra={"thinking": {"type": "enabled", "budget_tokens": 2048}})
    )
    assert diagnose(before, 0.0, thinking, 10.0).reason == Reason.OPTIONS_CHANGED
    assert diagnose(before, 0.0, with_options(SECOND), 10.0).reason == Reason.KEPT


def test_options_digest_fast_path_equals_the_computed_digest() -> None:
    import hashlib
    import json

    from cachekeys.diagnosis import CACHE_OPTIONS, NO_OPTIONS_DIGEST, options_digest

    def computed(request: ChatRequest) -> bytes:
        options = {
            "tool_choice": request.tool_choice,
            **{k: request.extra.get(k) for k in CACHE_OPTIONS},
        }
        return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).digest()

    assert computed(FIRST) == NO_OPTIONS_DIGEST == options_digest(FIRST)
    # part of every cache key's options: unchanged across releases
    assert NO_OPTIONS_DIGEST.hex() == (
        "93c8ed76cfb18bddb9f363def33ebba2b54454675a0bef24f0dd37025d5fb477"
    )
    other_extra = replace(FIRST, extra={"metadata": {"a": 1}, "reasoning": None})
    assert options_digest(other_extra) == NO_OPTIONS_DIGEST == computed(other_extra)
    for request in (
        replace(FIRST, tool_choice="auto"),
        replace(FIRST, extra={"reasoning_effort": "low"}),
        replace(FIRST, extra={"thinking": {"type": "enabled", "budget_tokens": 1024}}),
    ):
        assert options_digest(request) == computed(request) != NO_OPTIONS_DIGEST
