"""`lantern cache explain --session ID`: where and why a session's prompt prefix changed.

Reads the per-call cache diagnoses the ledger recorded (JSON written by gateway/prompt_cache);
`explain_rows` is pure so the text can be tested without a database. Never sees prompt text.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError

from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.queries import LedgerQueries
from gateway.reports.cache_pnl import cache_pnl, render_session_pnl

ALL_TIME = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC))

ADVICE = {
    "tools_changed": "the tool list or a tool definition changed: keep tools fixed for a session "
    "(cache.normalise.order_tools and canonical_json fix order-only changes)",
    "system_changed": "the system prompt changed: move dates and ids out of it "
    "(cache.normalise.relocate_volatile) or send updates as messages",
    "history_rewritten": "an earlier message was edited or removed (compaction, re-serialised "
    "tool calls): keep the conversation append-only",
    "model_changed": "the model changed: caches are per model",
    "options_changed": "tool_choice or the thinking/reasoning settings changed: the provider keeps "
    "only tools and system; keep them fixed for a session",
    "ttl_expired": "the gap exceeded the cache lifetime: a slow tool outlived it (cache.ttl: auto, "
    "the default, moves a session with long pauses to 1 h once it pays)",
    "volatile_block": "a value that changes on every call (a time, an id) sits in the tools or "
    "system prompt: Lantern stopped writing past it; cache.normalise.relocate_volatile: auto "
    "(the default) moves times and ids, always moves every pattern",
}


class LedgerSettings(Protocol):
    database_url: str


@dataclass(frozen=True, slots=True)
class ExplainedCall:
    at: datetime
    call: int
    reason: str
    first_changed: str | None
    stable_prefix_tokens: int
    expected_prefix_tokens: int
    predicted_read_tokens: int
    gap_s: float | None
    ttl: str | None = None  # the lifetime the autopilot chose for the call's markers
    pattern: str | None = None  # volatile_block: the volatile pattern seen in the block
    reported_read_tokens: int | None = None  # what the backend said it read from its cache
    autopilot: str = ""  # what the autopilot did to the call and saved ("": nothing)


def explain_rows(
    rows: Iterable[tuple[datetime | float, str] | tuple[datetime | float, str, int]],
) -> list[ExplainedCall]:
    """Parse (timestamp, diagnosis JSON[, cache-read tokens the backend reported]) rows; rows
    that are not diagnoses are skipped."""
    calls: list[ExplainedCall] = []
    for ts, text, *reported in rows:
        try:
            d = json.loads(text)
            at = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)
            calls.append(
                ExplainedCall(
                    at,
                    int(d.get("call", len(calls))),
                    str(d["reason"]),
                    d.get("first_changed"),
                    int(d["stable_prefix_tokens"]),
                    int(d["expected_prefix_tokens"]),
                    int(d["predicted_read_tokens"]),
                    d.get("gap_s"),
                    (d.get("ttl_choice") or {}).get("ttl"),
                    d.get("pattern"),
                    int(reported[0]) if reported else None,
                    autopilot_note(d.get("autopilot")),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return calls


def autopilot_note(autopilot: object) -> str:
    """`relocated iso_datetime,learned; tool args 1; waited 420 ms for a fan-out's first write;
    saved 0.004500 (1500 tokens)`, from the diagnosis's `autopilot` part."""
    if not isinstance(autopilot, dict):
        return ""
    parts = []
    if autopilot.get("relocated"):
        parts.append("relocated " + ",".join(str(k) for k in autopilot["relocated"]))
    if autopilot.get("tool_args"):
        parts.append(f"tool args {autopilot['tool_args']}")
    if autopilot.get("fanout_wait_ms") is not None:
        parts.append(f"waited {autopilot['fanout_wait_ms']} ms for a fan-out's first write")
    if autopilot.get("saved_tokens"):
        parts.append(
            f"saved {float(autopilot.get('saved_usd') or 0):.6f} ({autopilot['saved_tokens']} tokens)"
        )
    return "; ".join(parts)


def render_explanation(session_id: str, calls: list[ExplainedCall]) -> str:
    if not calls:
        return f"No cache diagnoses recorded for session {session_id}.\n"
    follow_ups = [c for c in calls if c.reason != "first_call"]
    kept = sum(c.reason == "kept" for c in follow_ups)
    share = f" ({100.0 * kept / len(follow_ups):.1f} %)" if follow_ups else ""
    lines = [
        f"Session {session_id}: {len(calls)} calls; prefix kept on {kept} of {len(follow_ups)} "
        f"follow-up calls{share}",
        "",
        f"{'call':>4}  {'time (UTC)':<19}  {'reason':<17}  {'first change':<14}  {'prefix':>7}  "
        f"{'expected':>8}  {'predicted':>9}  {'reported':>8}  {'gap s':>7}  {'ttl':>3}",
    ]
    for c in calls:
        gap = f"{c.gap_s:.1f}" if c.gap_s is not None else "-"
        reported = "-" if c.reported_read_tokens is None else str(c.reported_read_tokens)
        lines.append(
            f"{c.call:>4}  {c.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}  {c.reason:<17}  "
            f"{c.first_changed or '-':<14}  {c.stable_prefix_tokens:>7}  "
            f"{c.expected_prefix_tokens:>8}  {c.predicted_read_tokens:>9}  {reported:>8}  "
            f"{gap:>7}  {c.ttl or '-':>3}"
        )
    lines += [
        "",
        "predicted: cache reads the gateway expected; reported: the cache reads the backend "
        "reported; ttl: the lifetime the autopilot chose",
    ]
    acted = [c for c in calls if c.autopilot]
    if acted:
        lines += ["", "Autopilot:"]
    lines += [f"  call {c.call}: {c.autopilot}" for c in acted]
    breaks = [c for c in follow_ups if c.reason != "kept"]
    if breaks:
        lines += ["", "Breaks:"]
    for c in breaks:
        where = f" at {c.first_changed}" if c.first_changed else ""
        where += f" (pattern {c.pattern})" if c.pattern else ""
        lines.append(
            f"  call {c.call}{where}: {c.reason.replace('_', ' ')}; {c.predicted_read_tokens} of "
            f"{c.expected_prefix_tokens} cached tokens still usable. {ADVICE.get(c.reason, '')}"
        )
    return "\n".join(lines) + "\n"


def cli_explain(args: argparse.Namespace, settings: LedgerSettings) -> int:
    """args.session (required), args.tenant (optional: needed only when several tenants used
    the same session id, since sessions are per tenant)."""
    tenant = getattr(args, "tenant", None)
    engine = create_ledger_engine(settings.database_url)
    try:
        sessions = session_factory(engine)
        found = LedgerQueries(sessions).session_reads(args.session, tenant)
        tenants = sorted({row[1] for row in found})
        pnl = (
            cache_pnl(sessions, *ALL_TIME, tenants[0], args.session) if len(tenants) == 1 else None
        )
    except SQLAlchemyError as error:
        print(
            f"lantern cache explain: cannot read the ledger ({type(error).__name__}): "
            "is the database up and migrated?",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    if len(tenants) > 1:
        print(
            f"lantern cache explain: session {args.session!r} was used by several tenants; "
            f"pass --tenant with one of: {', '.join(tenants)}",
            file=sys.stderr,
        )
        return 2
    rows = [(ts, diagnosis, reads) for ts, _, diagnosis, reads in found]
    sys.stdout.write(render_explanation(args.session, explain_rows(rows)))
    if pnl is not None:
        sys.stdout.write("\n" + render_session_pnl(pnl))
    return 0
