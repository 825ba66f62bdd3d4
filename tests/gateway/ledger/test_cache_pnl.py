"""The cache P&L: ledger rows from real autopilot traces (prompt port -> provider fake), priced
by the gateway's pricing; the report's net equals the ledger's money to the cent, on SQLite and
on the real PostgreSQL; unread premiums, lost money per cause and TTL choices are reported."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import orjson
import sqlalchemy as sa

from adapters.pricing import Price
from adapters.types import Usage
from bench.agent_sessions.autopilot import TraceResult, run_trace
from bench.agent_sessions.traces import history_edit, pauses, timestamped
from gateway.core.cache_money import cache_money, with_autopilot_saving
from gateway.core.models_table import RoutePricing
from gateway.ledger.call_ledger import usage_row
from gateway.ledger.db import session_factory
from gateway.ledger.models import USAGE_TABLE
from gateway.ports import CallRecord
from gateway.reports.cache_pnl import AutopilotLine, cache_pnl, render_autopilot, render_pnl
from policies.model import TenantPolicy

MODEL = "claude-sonnet-4-5"
PRICING = RoutePricing(
    {
        MODEL: Price(
            input=Decimal("0.000003"),
            output=Decimal("0.000015"),
            cache_read=Decimal("0.0000003"),
            cache_write=Decimal("0.00000375"),
            cache_write_1h=Decimal("0.000006"),
        )
    }
)
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
NEVER = TenantPolicy.model_validate(
    {"tenant": "globex", "cache": {"normalise": {"relocate_volatile": "never"}}}
)
CENT = Decimal("0.01")


def _records(tenant: str, session: str, result: TraceResult) -> list[CallRecord]:
    records = []
    for i, (call, diagnosis) in enumerate(zip(result.calls, result.diagnoses, strict=True)):
        usage = Usage(call.uncached, 40, call.read, call.write, call.write_1h)
        money = cache_money(PRICING, MODEL, usage, diagnosis)
        records.append(
            CallRecord(
                request_id=f"{session}-{i}",
                attempt=0,
                tenant=tenant,
                key_id="k",
                session_id=session,
                model=MODEL,
                backend="anthropic",
                replica=None,
                status="ok",
                error_kind=None,
                usage=usage,
                cost_usd=PRICING.cost_usd(MODEL, usage),
                uncached_cost_usd=PRICING.uncached_cost_usd(MODEL, usage),
                ttft_ms=None,
                latency_ms=1.0,
                cache_diagnosis=diagnosis,
                cache_saved_usd=money.saved_usd,
                cache_premium_usd=money.premium_usd,
                cache_lost_usd=money.lost_usd,
                cache_cause=money.cause,
            )
        )
    return records


def test_pnl_sums_to_the_ledger_to_the_cent(engine) -> None:
    traces = {"edit": history_edit(), "pauses": pauses(), "clock": timestamped()}
    rows = []
    for n, (name, trace) in enumerate(traces.items()):
        tenant = "acme" if name != "clock" else "globex"
        # the clock trace under `relocate_volatile: never`: left in place, the timestamp is
        # the do-no-harm case (by default it is relocated and the session caches like a clean one)
        policy = NEVER if name == "clock" else None
        for i, record in enumerate(_records(tenant, name, run_trace(trace, policy))):
            rows.append(usage_row(record, T0 + timedelta(minutes=n * 30, seconds=i)))
    with engine.begin() as connection:
        connection.execute(sa.insert(USAGE_TABLE), [r.to_values() for r in rows])
        cost, uncached = connection.execute(
            sa.select(
                sa.func.sum(USAGE_TABLE.c.cost_usd), sa.func.sum(USAGE_TABLE.c.uncached_cost_usd)
            )
        ).one()

    pnl = cache_pnl(session_factory(engine), T0, T0 + timedelta(days=1))

    assert pnl.total.num_calls == 60
    assert pnl.total.cost_usd == cost and pnl.total.uncached_cost_usd == uncached
    assert pnl.total.net_usd.quantize(CENT) == (uncached - cost).quantize(CENT)
    assert abs(pnl.total.net_usd - (uncached - cost)) < Decimal("0.000001")
    assert [line.key for line in pnl.by_tenant] == ["acme", "globex"]
    assert [line.key for line in pnl.by_session] == ["acme/edit", "acme/pauses", "globex/clock"]
    clock = pnl.by_session[2]  # a volatile system prompt: no write, no premium, nothing lost
    assert (clock.saved_usd, clock.premium_usd, clock.lost_usd) == (0, 0, 0)
    assert dict(pnl.lost_by_cause).keys() == {"history_edit"}
    edit = pnl.by_session[0]
    assert edit.lost_usd == dict(pnl.lost_by_cause)["history_edit"] > 0
    # each session's last write is never read: its premium is unread
    assert 0 < edit.unread_premium_usd < edit.premium_usd
    assert dict(pnl.ttl_choices) == {"5m": 41, "1h": 19}
    one = cache_pnl(session_factory(engine), T0, T0 + timedelta(days=1), "acme", "edit").total
    assert (one.num_calls, one.net_usd, one.lost_usd) == (20, edit.net_usd, edit.lost_usd)
    assert one.unread_premium_usd == edit.unread_premium_usd
    text = render_pnl(pnl)
    assert "history_edit" in text and "1h x19" in text


def test_keep_warm_reads_are_their_own_line(engine) -> None:
    records = _records("acme", "pauses", run_trace(pauses()))[:3]
    usage = Usage(0, 1, records[-1].usage.prompt_tokens, 0)  # the last prompt, all read
    money = cache_money(PRICING, MODEL, usage, records[-1].cache_diagnosis)
    read = dataclasses.replace(
        records[-1],
        request_id="pauses-warm",
        usage=usage,
        cost_usd=PRICING.cost_usd(MODEL, usage),
        uncached_cost_usd=PRICING.uncached_cost_usd(MODEL, usage),
        cache_saved_usd=money.saved_usd,
        cache_premium_usd=money.premium_usd,
        door="keep_warm",
    )
    rows = [usage_row(r, T0 + timedelta(seconds=i)) for i, r in enumerate([*records, read])]
    with engine.begin() as connection:
        connection.execute(sa.insert(USAGE_TABLE), [r.to_values() for r in rows])

    pnl = cache_pnl(session_factory(engine), T0, T0 + timedelta(days=1))

    assert pnl.total.num_calls == 4 and pnl.keep_warm.num_calls == 1
    warm = pnl.keep_warm
    assert warm.cost_usd.quantize(CENT / 10**6) == Decimal(str(read.cost_usd)) > 0
    assert warm.premium_usd == 0 and warm.saved_usd > 0
    assert pnl.total.cost_usd.quantize(CENT / 10**6) == Decimal(
        str(round(sum(r.cost_usd for r in [*records, read]), 8))
    )
    assert "Keep-warm reads: 1 calls" in render_pnl(pnl)


def _acted(session: str, i: int, usage: Usage, diagnosis: dict) -> CallRecord:
    """A call's ledger row as `call_record` writes it: the autopilot's saving in its diagnosis."""
    text = orjson.dumps({"tenant": "acme", "expected_prefix_tokens": 0, **diagnosis}).decode()
    money = cache_money(PRICING, MODEL, usage, text)
    if money.autopilot_saved_tokens:
        text = with_autopilot_saving(text, money)
    return CallRecord(
        request_id=f"{session}-{i}",
        attempt=0,
        tenant="acme",
        key_id="k",
        session_id=session,
        model=MODEL,
        backend="anthropic",
        replica=None,
        status="ok",
        error_kind=None,
        usage=usage,
        cost_usd=PRICING.cost_usd(MODEL, usage),
        uncached_cost_usd=PRICING.uncached_cost_usd(MODEL, usage),
        ttft_ms=None,
        latency_ms=1.0,
        cache_diagnosis=text,
        cache_saved_usd=money.saved_usd,
        cache_premium_usd=money.premium_usd,
        cache_lost_usd=money.lost_usd,
        cache_cause=money.cause,
    )


def test_what_the_autopilot_did_and_saved(engine) -> None:
    moved = {"relocated": ["iso_datetime"], "tool_args": 0}
    records = [
        # a timestamped session: relocated from its first call (nothing read yet: nothing saved)
        _acted("s1", 0, Usage(3, 40, 0, 6000), {"reason": "first_call", "autopilot": moved}),
        # its follow-up read the prefix the relocation kept: 6,000 x (3.00 - 0.30) $/M
        _acted(
            "s1",
            1,
            Usage(3, 40, 6000, 1500),
            {"reason": "kept", "autopilot": {**moved, "tool_args": 1}},
        ),
        # a sub-agent that waited behind a fan-out's first write read 20,023 tokens instead of
        # writing them: 20,023 x (3.75 - 0.30) $/M
        _acted(
            "s2",
            0,
            Usage(3, 40, 20_023, 22),
            {"reason": "first_call", "autopilot": {"relocated": [], "fanout_wait_ms": 412}},
        ),
    ]
    rows = [usage_row(r, T0 + timedelta(seconds=i)) for i, r in enumerate(records)]
    with engine.begin() as connection:
        connection.execute(sa.insert(USAGE_TABLE), [r.to_values() for r in rows])

    pnl = cache_pnl(session_factory(engine), T0, T0 + timedelta(days=1))

    assert pnl.autopilot == AutopilotLine(
        relocated=(("iso_datetime", 2),),
        num_tool_args=1,
        num_fanout_waits=1,
        saved_tokens=26_023,
        saved_usd=Decimal("0.08527935"),
    )
    assert orjson.loads(records[2].cache_diagnosis)["autopilot"] == {
        "relocated": [],
        "fanout_wait_ms": 412,
        "saved_tokens": 20_023,
        "saved_usd": 0.06907935,
    }
    assert render_autopilot(pnl.autopilot) == (
        "Autopilot: relocated (iso_datetime x2); canonical tool args x1; fan-out waits x1; "
        "saved 0.085279 (26023 tokens read instead of written or resent)"
    )
    assert render_autopilot(pnl.autopilot) in render_pnl(pnl)
