"""Session cache diagnosis: each call compared with its session's previous one (bounded fairly
by tenant), the header and ledger JSON it yields, and predicted-vs-reported reads per tenant.

Keeps digests and token counts only, never prompt text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from prometheus_client import CollectorRegistry

from adapters.records import slot_init
from cachekeys.diagnosis import (
    CacheDiagnosis,
    PromptFingerprint,
    Reason,
    diagnose,
)
from cachekeys.normalise import Edits
from cachekeys.tenant_table import TenantTable
from gateway.core.prompt_prepare import PromptFacts
from gateway.ports import PreparedPrompt
from gateway.telemetry.series import CounterSeries

MAX_SESSIONS = 100_000

Seen = tuple[PromptFingerprint, float, int]  # a session's last call: fingerprint, when, index


@slot_init
@dataclass(frozen=True, slots=True)
class CacheReport:
    """One call's diagnosis, as the header, the ledger JSON and the metrics see it."""

    tenant: str
    session_id: str
    call_index: int  # 0 for the first call Lantern saw in this session
    diagnosis: CacheDiagnosis
    edits: Edits = Edits()  # what the autopilot did to the call's prompt

    def header_value(self) -> str:
        """The `x-lantern-cache` header's value."""
        return self.verdict_parts()[0]

    def verdict_parts(self) -> tuple[str, dict[str, object]]:
        """The header's value and the ledger JSON's object at once, as the port reads them for
        every call: the reason read once (`str` of a StrEnum is its value, with no call to
        `.value`), the object built in one literal (call, tenant, the diagnosis, autopilot)."""
        d = self.diagnosis
        reason = str(d.reason)
        gap_s = d.gap_s
        body: dict[str, object] = {
            "call": self.call_index,
            "tenant": self.tenant,
            "reason": reason,
            "kept": d.kept,
            "stable_prefix_tokens": d.stable_prefix_tokens,
            "expected_prefix_tokens": d.expected_prefix_tokens,
            "predicted_read_tokens": d.predicted_read_tokens,
            "first_changed": d.first_changed,
            "gap_s": None if gap_s is None else round(gap_s, 3),
            "pattern": d.pattern,
        }
        header = reason
        if d.first_changed:
            header += f"; block={d.first_changed}"
        if d.reason is Reason.VOLATILE_BLOCK:
            header += f"; pattern={d.pattern}; advice=relocate_volatile"
        relocated, num_tool_args = self.edits.relocated, self.edits.num_tool_args
        if relocated or num_tool_args:  # not `Edits()`
            body["autopilot"] = {"relocated": list(relocated), "tool_args": num_tool_args}
            if relocated:
                header += "; relocated=" + ",".join(relocated)
            if num_tool_args:
                header += f"; tool_args={num_tool_args}"
        header += (
            f"; prefix={d.stable_prefix_tokens}; expected={d.expected_prefix_tokens}"
            f"; read={d.predicted_read_tokens}"
        )
        return header, body

    def to_json(self) -> str:
        return orjson.dumps(self.as_dict()).decode()

    def as_dict(self) -> dict[str, object]:
        """The ledger JSON's object (`to_json` encodes it)."""
        return self.verdict_parts()[1]


class SessionCacheTracker:
    """The previous call of each session, compared with each new call. Sessions are kept by
    tenant and session, so another tenant sending the same session id has a session of its own;
    past `max_sessions` the tenant holding the most loses its oldest, so one tenant's flood of
    new sessions never changes another's diagnosis.

    `observe` reads; the call it saw is kept aside and written into the table by `flush`
    (after the reply), in order. A later call of the session reads it from there meanwhile,
    and when the writes could push an entry out, they are made before the read: every call
    sees what it would if each call were written as it was observed."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: TenantTable[str, Seen] = TenantTable(max_sessions)
        self._num_written = 0  # entries in `_sessions`, which only `flush` changes
        self._max_sessions = max_sessions
        self._pending: dict[tuple[str, str], Seen] = {}  # observed, not written: newest last

    def observe(
        self, tenant: str, session_id: str, prepared: PreparedPrompt, now_s: float
    ) -> CacheReport:
        facts = prepared.diagnosis
        if not isinstance(facts, PromptFacts):
            raise TypeError(
                "observe() needs a PreparedPrompt made by gateway.core.prompt_cache.prepare"
            )
        fingerprint = facts.fingerprint
        key = (tenant, session_id)
        if self._num_written + len(self._pending) >= self._max_sessions:
            self.flush()  # writing them may evict: in order, before reading
        pending = self._pending
        try:  # the call observed last (not written yet, or written)
            previous = pending.pop(key) if key in pending else self._sessions[key]
        except KeyError:  # the session's first call
            diagnosis, index = diagnose(None, None, fingerprint, now_s), 0
        else:
            diagnosis = diagnose(previous[0], previous[1], fingerprint, now_s)
            index = previous[2] + 1
        pending[key] = (fingerprint, now_s, index)
        return CacheReport(tenant, session_id, index, diagnosis, facts.edits)

    def flush(self) -> None:
        """Write the calls observed since the last flush, each as its session's newest entry."""
        pending, self._pending = self._pending, {}
        sessions = self._sessions
        for key, seen in pending.items():
            sessions.pop(key, None)
            sessions[key] = seen
        self._num_written = len(sessions)

    def __len__(self) -> int:
        self.flush()
        return len(self._sessions)

    def num_entries(self, tenant: str) -> int:
        self.flush()
        return self._sessions.num_entries(tenant)


class CacheMetrics:
    """Prefix stability and predicted-vs-reported cache reads, per tenant."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        r = registry or CollectorRegistry()
        self.calls = CounterSeries(
            "lantern_cache_calls", "Calls by cache diagnosis", ["tenant", "reason"], r
        )
        self.predicted = CounterSeries(
            "lantern_cache_predicted_read_tokens",
            "Cache reads Lantern predicted",
            ["tenant"],
            r,
        )
        self.reported = CounterSeries(
            "lantern_cache_reported_read_tokens",
            "Cache reads the provider reported",
            ["tenant"],
            r,
        )
        self.surprises = CounterSeries(
            "lantern_cache_prediction_misses",
            "Calls whose reported reads differ from the prediction",
            ["tenant", "direction"],
            r,
        )


RECONCILE_SLACK_TOKENS = 64  # our tokenizer is not the provider's: small deltas are expected
RECONCILE_SLACK_RATIO = 0.05


def reconcile(
    report: Mapping[str, object], reported_cache_read_tokens: int, metrics: CacheMetrics
) -> int:
    """Record predicted vs reported reads (`report`: the diagnosis JSON's object); returns
    reported - predicted. A delta beyond the tokenizer slack counts as a prediction miss
    ("less": a break Lantern did not foresee)."""
    tenant, predicted = str(report["tenant"]), int(report["predicted_read_tokens"])  # type: ignore[call-overload]
    metrics.predicted.inc((tenant,), predicted)
    metrics.reported.inc((tenant,), reported_cache_read_tokens)
    delta = reported_cache_read_tokens - predicted
    slack = RECONCILE_SLACK_TOKENS + RECONCILE_SLACK_RATIO * max(
        predicted, reported_cache_read_tokens
    )
    if abs(delta) > slack:
        metrics.surprises.inc((tenant, "more" if delta > 0 else "less"))
    return delta
