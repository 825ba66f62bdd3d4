"""The prompt cache's profit and loss, from the usage ledger: money saved by reads, premiums paid
for writes (and of those, for writes no later call read), money lost per break cause; by tenant,
session and cause. `cache_pnl` is the query a console calls; `cli_cache_pnl` is
`lantern report cache-pnl`. Sync database I/O: async callers use a thread.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal

import orjson
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.models import UsageRecord
from gateway.reports.rows import InvalidReportQuery, LedgerSettings, parse_period

ZERO = Decimal(0)
KEEP_WARM = "keep_warm"  # the ledger's door of a keep-warm read


@dataclass(frozen=True, slots=True)
class PnlLine:
    """Money of one group: `net_usd` = saved - premium = uncached cost - cost."""

    key: str
    num_calls: int = 0
    saved_usd: Decimal = ZERO
    premium_usd: Decimal = ZERO
    unread_premium_usd: Decimal = ZERO  # premiums for writes no later call of the session read
    lost_usd: Decimal = ZERO
    cost_usd: Decimal = ZERO
    uncached_cost_usd: Decimal = ZERO

    @property
    def net_usd(self) -> Decimal:
        return self.saved_usd - self.premium_usd

    def plus(self, other: PnlLine) -> PnlLine:
        return PnlLine(
            self.key,
            self.num_calls + other.num_calls,
            self.saved_usd + other.saved_usd,
            self.premium_usd + other.premium_usd,
            self.unread_premium_usd + other.unread_premium_usd,
            self.lost_usd + other.lost_usd,
            self.cost_usd + other.cost_usd,
            self.uncached_cost_usd + other.uncached_cost_usd,
        )


@dataclass(frozen=True, slots=True)
class AutopilotLine:
    """What the cache autopilot did (calls per action) and what it saved, from the diagnoses."""

    relocated: tuple[tuple[str, int], ...] = ()  # kind of value moved -> calls
    num_tool_args: int = 0  # calls whose tool-call arguments were re-serialised
    num_fanout_waits: int = 0  # calls that waited behind a fan-out's first write
    saved_tokens: int = 0  # tokens read that the edits kept readable or a wait did not write
    saved_usd: Decimal = ZERO

    def plus(self, autopilot: object) -> AutopilotLine:
        if not isinstance(autopilot, dict):
            return self
        kinds = dict(self.relocated)
        for kind in autopilot.get("relocated") or ():
            kinds[str(kind)] = kinds.get(str(kind), 0) + 1
        return AutopilotLine(
            tuple(sorted(kinds.items())),
            self.num_tool_args + (1 if autopilot.get("tool_args") else 0),
            self.num_fanout_waits + (autopilot.get("fanout_wait_ms") is not None),
            self.saved_tokens + int(autopilot.get("saved_tokens") or 0),
            self.saved_usd + Decimal(str(autopilot.get("saved_usd") or 0)),
        )


@dataclass(frozen=True, slots=True)
class CachePnl:
    since: datetime
    until: datetime
    total: PnlLine
    by_tenant: tuple[PnlLine, ...]
    by_session: tuple[PnlLine, ...]  # key "tenant/session"
    lost_by_cause: tuple[tuple[str, Decimal], ...]  # cause -> money lost, largest first
    ttl_choices: tuple[tuple[str, int], ...]  # "5m"/"1h" -> calls whose markers used it
    # the gateway's keep-warm reads (`cache.keep_warm`; door keep_warm), also counted above
    keep_warm: PnlLine = PnlLine(KEEP_WARM)
    autopilot: AutopilotLine = AutopilotLine()


@dataclass(frozen=True, slots=True)
class _Call:
    tenant: str
    session: str
    read: int
    written: int
    line: PnlLine
    cause: str | None
    ttl: str | None
    keep_warm: bool = False
    autopilot: object = None  # the diagnosis's `autopilot` part


def cache_pnl(
    sessions: sessionmaker[Session],
    since: datetime,
    until: datetime,
    tenant: str | None = None,
    session_id: str | None = None,
) -> CachePnl:
    """The P&L of the calls in [since, until), optionally of one tenant (and one session)."""
    u = UsageRecord
    query = (
        sa.select(u)
        .where(u.ts >= since, u.ts < until)
        .order_by(u.tenant, u.session_id, u.ts, u.request_id, u.attempt)
    )
    if tenant is not None:
        query = query.where(u.tenant == tenant)
    if session_id is not None:
        query = query.where(u.session_id == session_id)
    with sessions() as session:
        calls = [_call(row) for row in session.execute(query).scalars()]
    calls = list(_with_unread_premiums(calls))
    by_tenant = _group(calls, lambda c: c.tenant)
    by_session = _group(calls, lambda c: f"{c.tenant}/{c.session}")
    lost: dict[str, Decimal] = defaultdict(Decimal)
    ttls: dict[str, int] = defaultdict(int)
    for c in calls:
        if c.cause is not None:
            lost[c.cause] += c.line.lost_usd
        if c.ttl is not None:
            ttls[c.ttl] += 1
    total = _sum("total", (c.line for c in calls))
    warm = _sum(KEEP_WARM, (c.line for c in calls if c.keep_warm))
    autopilot = AutopilotLine()
    for c in calls:
        autopilot = autopilot.plus(c.autopilot)
    return CachePnl(
        since,
        until,
        total,
        by_tenant,
        by_session,
        tuple(sorted(lost.items(), key=lambda kv: (-kv[1], kv[0]))),
        tuple(sorted(ttls.items())),
        warm,
        autopilot,
    )


def _call(row: UsageRecord) -> _Call:
    line = PnlLine(
        "",
        1,
        row.cache_saved_usd,
        row.cache_premium_usd,
        ZERO,
        row.cache_lost_usd,
        row.cost_usd,
        row.uncached_cost_usd,
    )
    ttl, autopilot = None, None
    if row.cache_diagnosis:
        diagnosis = orjson.loads(row.cache_diagnosis)
        choice = diagnosis.get("ttl_choice")
        ttl = choice.get("ttl") if isinstance(choice, dict) else None
        autopilot = diagnosis.get("autopilot")
    return _Call(
        row.tenant,
        row.session_id or "",
        row.cache_read_tokens,
        row.cache_write_tokens,
        line,
        row.cache_cause,
        ttl,
        row.door == KEEP_WARM,
        autopilot,
    )


def _with_unread_premiums(calls: list[_Call]) -> Iterable[_Call]:
    """A write's premium is unread for the part of it the session's next call did not read
    (all of it after the session's last call)."""
    for i, c in enumerate(calls):
        if not c.written:
            yield c
            continue
        following = calls[i + 1] if i + 1 < len(calls) else None
        same = following is not None and (following.tenant, following.session) == (
            c.tenant,
            c.session,
        )
        next_read = following.read if same and following is not None else 0
        unread = min(max(c.read + c.written - next_read, 0), c.written)
        share = c.line.premium_usd * unread / c.written
        line = replace(c.line, unread_premium_usd=share)
        yield replace(c, line=line)


def _group(calls: list[_Call], key_of: Callable[[_Call], str]) -> tuple[PnlLine, ...]:
    groups: dict[str, PnlLine] = {}
    for c in calls:
        key = key_of(c)
        groups[key] = groups.get(key, PnlLine(key)).plus(c.line)
    return tuple(groups[k] for k in sorted(groups))


def _sum(key: str, lines: Iterable[PnlLine]) -> PnlLine:
    total = PnlLine(key)
    for line in lines:
        total = total.plus(line)
    return total


def render_pnl(pnl: CachePnl) -> str:
    """The P&L as text (the cost report's cache section and `lantern report cache-pnl`)."""
    out = [
        f"Prompt cache P&L {pnl.since.isoformat()} .. {pnl.until.isoformat()} (USD)",
        "",
        f"{'group':<40} {'calls':>6} {'saved':>12} {'premium':>12} {'unread':>12} "
        f"{'net':>12} {'lost':>12}",
    ]
    for line in (*pnl.by_tenant, *pnl.by_session, pnl.total):
        out.append(
            f"{line.key[:40]:<40} {line.num_calls:>6} {line.saved_usd:>12.6f} "
            f"{line.premium_usd:>12.6f} {line.unread_premium_usd:>12.6f} "
            f"{line.net_usd:>12.6f} {line.lost_usd:>12.6f}"
        )
    out += ["", "Lost by cause:"]
    out += [f"  {cause:<20} {money:>12.6f}" for cause, money in pnl.lost_by_cause] or ["  -"]
    out += ["", "Cache lifetimes chosen (calls): " + _ttls(pnl)]
    warm = pnl.keep_warm
    out.append(f"Keep-warm reads: {warm.num_calls} calls, cost {warm.cost_usd:.6f}")
    out.append(render_autopilot(pnl.autopilot))
    check = pnl.total.uncached_cost_usd - pnl.total.cost_usd
    out.append(f"Check: uncached - cost = {check:.6f} = net {pnl.total.net_usd:.6f}")
    return "\n".join(out) + "\n"


def render_session_pnl(pnl: CachePnl) -> str:
    """One session's money in two lines (for `lantern cache explain`), and a third with what
    the autopilot did when it did anything."""
    t = pnl.total
    lost = ", ".join(f"{cause} {money:.6f}" for cause, money in pnl.lost_by_cause) or "-"
    text = (
        f"Cache P&L (USD): saved {t.saved_usd:.6f}, write premiums {t.premium_usd:.6f} "
        f"(unread {t.unread_premium_usd:.6f}), net {t.net_usd:.6f}\n"
        f"Lost to breaks: {t.lost_usd:.6f} ({lost}); lifetimes chosen: {_ttls(pnl)}\n"
    )
    if pnl.autopilot != AutopilotLine():
        text += render_autopilot(pnl.autopilot) + "\n"
    return text


def render_autopilot(a: AutopilotLine) -> str:
    """What the autopilot did and saved, in one line."""
    moved = ", ".join(f"{kind} x{n}" for kind, n in a.relocated) or "-"
    return (
        f"Autopilot: relocated ({moved}); canonical tool args x{a.num_tool_args}; "
        f"fan-out waits x{a.num_fanout_waits}; saved {a.saved_usd:.6f} "
        f"({a.saved_tokens} tokens read instead of written or resent)"
    )


def _ttls(pnl: CachePnl) -> str:
    return ", ".join(f"{ttl} x{n}" for ttl, n in pnl.ttl_choices) or "-"


def cli_cache_pnl(args: argparse.Namespace, settings: LedgerSettings) -> int:
    """`lantern report cache-pnl`: args.since, args.until, args.tenant."""
    try:
        since, until = parse_period(args.since, args.until, datetime.now(UTC))
    except InvalidReportQuery as error:
        print(f"lantern report cache-pnl: {error}", file=sys.stderr)
        return 2
    engine = create_ledger_engine(settings.database_url)
    try:
        pnl = cache_pnl(session_factory(engine), since, until, getattr(args, "tenant", None))
    except SQLAlchemyError as error:
        print(
            f"lantern report cache-pnl: cannot read the ledger ({type(error).__name__})",
            file=sys.stderr,
        )
        return 1
    finally:
        engine.dispose()
    sys.stdout.write(render_pnl(pnl))
    return 0
