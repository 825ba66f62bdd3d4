"""The autopilot's pure parts: volatile probes, the TTL choice, do-no-harm limits, stones."""

from __future__ import annotations

import pytest

from adapters.types import ChatRequest, Message, TextPart, ToolResultPart, ToolSpec, ToolUsePart
from cachekeys.layout import PromptLayout, request_blocks
from cachekeys.planner import Advice, ReuseRecord, advise, plan_markers
from cachekeys.ttl import MAX_GAPS, choose_ttl, fixed_ttl, p_long_gap
from cachekeys.volatile_probe import VolatileProbe

MODEL = "claude-sonnet-4-5"


def _request(system: str, steps: int = 1, fan_out: int = 1) -> ChatRequest:
    tools = (ToolSpec("read", "Read a file.", {"type": "object"}),)
    messages = [Message("user", (TextPart("task"),))]
    for t in range(steps):
        uses = tuple(ToolUsePart(f"c{t}_{k}", "read", "{}") for k in range(fan_out))
        results = tuple(ToolResultPart(f"c{t}_{k}", f"out {t} {k}") for k in range(fan_out))
        messages += [Message("assistant", uses), Message("user", results)]
    return ChatRequest(MODEL, system=(TextPart(system),), messages=tuple(messages), tools=tools)


def _layout(request: ChatRequest, tokens_each: int = 600) -> PromptLayout:
    blocks = request_blocks(request)
    return PromptLayout(blocks, tuple(tokens_each for _ in blocks))


def test_probe_masks_volatile_values_and_names_the_pattern() -> None:
    probe = VolatileProbe()
    a = _layout(_request("Now: 2026-11-30T09:00:01Z. Be brief."))
    b = _layout(_request("Now: 2026-11-30T09:00:21Z. Be brief."))
    pa, pb = probe.probes(a.blocks), probe.probes(b.blocks)
    assert a.blocks[1].digest != b.blocks[1].digest
    assert pa[1].masked == pb[1].masked and pa[1].pattern == "iso_datetime"
    assert pa[1].is_presumed_volatile
    assert pa[2].masked == a.blocks[2].digest  # messages are never masked
    tenant = VolatileProbe([r"ticket-\d+"])
    ticket = _layout(_request("Working on ticket-123."))
    assert tenant.probe(ticket.blocks[1]).pattern == "tenant[0]"


def test_ttl_choice_pays_the_2x_write_only_when_expected_saving_covers_it() -> None:
    assert p_long_gap(()) == pytest.approx(0.05)
    assert choose_ttl((), 6000, 6000).ttl == "5m"  # a first call: agents call again quickly
    assert choose_ttl((20.0, 20.0, 20.0), 30000, 1500).ttl == "5m"
    long = choose_ttl((20.0, 900.0), 30000, 1500)
    assert long.ttl == "1h" and long.saving > long.premium == pytest.approx(1125.0)
    assert choose_ttl((900.0,), 30000, 0).ttl == "5m"  # nothing written: nothing to pay for
    assert choose_ttl((86400.0, 86400.0), 30000, 1500).ttl == "5m"  # a day: 1 h will not help
    assert fixed_ttl("1h").ttl == "1h"


def test_a_session_s_kept_gap_weights_choose_as_its_gaps_do() -> None:
    probe = VolatileProbe()
    layout = _layout(_request("Be brief.", steps=3))
    probes = probe.probes(layout.blocks)
    record, at, gaps = None, 0.0, []
    for gap in (20.0, 900.0, 40.0, 1800.0, 30.0) * 8:  # 40 gaps: the oldest ones drop out
        record = ReuseRecord.of(layout, probes, at, record)
        at += gap
        advice = advise(record, layout, probes, "auto", at)
        gaps.append(gap)
        window = (*gaps[-MAX_GAPS - 1 : -1], gap) if len(gaps) > MAX_GAPS else tuple(gaps)
        assert advice.choice.p_long == pytest.approx(p_long_gap(window), abs=1e-12)
    assert record is not None and len(record.long_weights) == len(record.gaps_s) == MAX_GAPS


def test_first_call_writes_nothing_past_a_timestamp_in_the_system_prompt() -> None:
    layout = _layout(_request("Now: 2026-11-30T09:00:01Z."))
    probes = VolatileProbe().probes(layout.blocks)
    advice = advise(None, layout, probes, "auto", 0.0)
    assert advice.limit == 1 and advice.volatile is not None
    assert advice.volatile.name == "system[0]"
    assert plan_markers(layout, advice, 500).indices == (0,)  # the tools only


def test_a_head_block_that_stays_put_is_cached_again() -> None:
    probe = VolatileProbe()
    first = _layout(_request("Now: 2026-11-30T09:00:01Z."))
    record = ReuseRecord.of(first, probe.probes(first.blocks), 0.0, None)
    same = _layout(_request("Now: 2026-11-30T09:00:01Z.", steps=2))
    advice = advise(record, same, probe.probes(same.blocks), "auto", 20.0)
    assert advice.limit is None


def test_a_head_block_changing_twice_stops_the_writes_after_it() -> None:
    probe = VolatileProbe(use_defaults=False)
    layouts = [_layout(_request(f"Mood {m}.")) for m in ("calm", "busy", "odd")]
    record = ReuseRecord.of(layouts[0], probe.probes(layouts[0].blocks), 0.0, None)
    once = advise(record, layouts[1], probe.probes(layouts[1].blocks), "5m", 1.0)
    assert once.limit is None  # one change may be a real edit
    record = ReuseRecord.of(layouts[1], probe.probes(layouts[1].blocks), 1.0, record)
    twice = advise(record, layouts[2], probe.probes(layouts[2].blocks), "5m", 2.0)
    assert twice.limit == 1 and twice.volatile is not None and twice.volatile.pattern == ""


def test_stepping_stones_every_20_blocks_use_the_spare_breakpoints() -> None:
    layout = _layout(_request("Be brief.", steps=25))  # 2 + 51 blocks of 600 tokens
    plan = plan_markers(layout, Advice(fixed_ttl("5m")), 1024)
    last = len(layout.blocks) - 1
    # system (the tools alone are under the minimum), the conversation, two stones
    assert plan.indices == (1, last - 40, last - 20, last)
