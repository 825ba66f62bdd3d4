"""One tenant's state in the in-process quota store, and the steps on it that need no limits:
leases that end, session counts, the budget's sums.

Must not read the clock or decide admission: `quotas.memory` does, with these.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Literal

SESSION_SWEEP_MIN = 1024


@dataclass(slots=True)
class Record:
    tokens: int
    cost_micro_usd: int
    period: str
    state: Literal["active", "expired", "settled"] = "active"


@dataclass(slots=True)
class Book:
    """One tenant's state. `window` is ordered by admission time (the clock never goes back)."""

    clock_ms: int = 0
    tokens_used: int = 0
    window: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)
    active: dict[str, int] = field(default_factory=dict)
    # (lease expiry ms, id) of `active`, soonest first; settled ones stay until due or until
    # more than `max_stale` of them are there (then `leases` is rebuilt from `active`)
    leases: list[tuple[int, str]] = field(default_factory=list)
    num_stale: int = 0
    max_stale: int = 64
    records: dict[str, Record] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    # session id -> (calls, expiry ms, since ms: when this run of the count began)
    sessions: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    sessions_swept_at: int = 0
    tool_starts: deque[int] = field(default_factory=deque)  # admission ms, oldest first
    tool_active: dict[str, int] = field(default_factory=dict)  # call id -> lease expiry ms

    def add_budget(self, kind: str, period: str, delta: int) -> None:
        key = f"{kind}:{period}"
        self.budget[key] = self.budget.get(key, 0) + delta

    def budget_of(self, kind: str, period: str) -> int:
        return self.budget.get(f"{kind}:{period}", 0)

    def end_due_leases(self, now: int) -> None:
        """Leases that ended with their call unsettled (its process died): the slot frees and
        the hold is charged."""
        leases = self.leases
        while leases and leases[0][0] <= now:
            expiry_ms, reservation_id = heapq.heappop(leases)
            if self.active.get(reservation_id) != expiry_ms:
                continue  # settled before its lease ended
            del self.active[reservation_id]
            record = self.records[reservation_id]
            self.add_budget("held", record.period, -record.cost_micro_usd)
            self.add_budget("spend", record.period, record.cost_micro_usd)
            if reservation_id in self.window:
                record.state = "expired"
            else:
                del self.records[reservation_id]

    def drop_stale_leases(self) -> None:
        """Rebuild the lease heap from the live leases: settled ones never outnumber the live
        ones (plus 64), so the heap stays within twice the tenant's calls in flight."""
        self.leases = [(expiry_ms, rid) for rid, expiry_ms in self.active.items()]
        heapq.heapify(self.leases)
        self.num_stale, self.max_stale = 0, len(self.active) + 64

    def session_calls(self, session_id: str, now: int) -> int:
        calls, expiry_ms, _ = self.sessions.get(session_id, (0, 0, 0))
        return calls if expiry_ms > now else 0

    def count_session_call(self, session_id: str, now: int, ttl_ms: int) -> None:
        calls = self.session_calls(session_id, now)
        since = self.sessions[session_id][2] if calls else now  # 0 calls: a new run of the count
        self.sessions[session_id] = (calls + 1, now + ttl_ms, since)

    def uncount_session_call(self, session_id: str, admitted_ms: int) -> None:
        """Take back the call admitted at `admitted_ms`, if it counts in the session's current
        run (one that began after it, when the session had expired, never held it)."""
        calls, expiry_ms, since = self.sessions.get(session_id, (0, 0, 0))
        if calls > 0 and since <= admitted_ms:
            self.sessions[session_id] = (calls - 1, expiry_ms, since)

    def sweep_sessions(self, now: int, max_sessions: int) -> None:
        """Forget expired sessions once the table doubles; keep at most half the cap of live
        ones (those that expire last), so a tenant's table stays under `max_sessions`."""
        if len(self.sessions) < max(SESSION_SWEEP_MIN, 2 * self.sessions_swept_at):
            return
        live = {sid: v for sid, v in self.sessions.items() if v[1] > now}
        keep = max_sessions // 2
        if len(live) > keep:  # a forgotten session's count restarts: that tenant's own doing
            live = dict(heapq.nlargest(keep, live.items(), key=lambda item: item[1][1]))
        self.sessions = live
        self.sessions_swept_at = len(self.sessions)
