"""`ToolRunLedger`: the sandbox's `RunMeter`, one usage row (kind `tool_run`) per tool run that
ran, priced per vCPU-second and GB-second of its runner. Through the same spool and writer as
model calls; never on a model call's path, never raising into the run.

The row id is derived from the run id, so a run metered twice (a Fargate task followed again by
the worker that took its lease over) is stored once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from gateway.ledger.call_ledger import LineSink, usage_row_id
from gateway.ledger.models import UsageRow, to_money
from sandbox.metering import FinishedRun
from sandbox.types import RunStatus

log = logging.getLogger(__name__)
TOOL_RUN_BACKEND = "sandbox:{runner}"  # the row's backend: sandbox:local or sandbox:fargate
_SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True, slots=True)
class RunnerPrice:
    """USD per vCPU-hour and per GB-hour of a runner, and the seconds it bills at least (a
    run's seconds are rounded up to the whole second, then raised to this)."""

    vcpu_hour_usd: float = 0.0
    gb_hour_usd: float = 0.0
    min_billed_s: float = 0.0

    def billed_s(self, duration_s: float) -> float:
        return float(max(math.ceil(duration_s), self.min_billed_s))

    def cost_usd(self, vcpu_seconds: float, gb_seconds: float) -> Decimal:
        """Exact to the ledger's 1e-8 dollar (decimal arithmetic on the prices as written)."""
        vcpu = Decimal(repr(vcpu_seconds)) * Decimal(repr(self.vcpu_hour_usd))
        memory = Decimal(repr(gb_seconds)) * Decimal(repr(self.gb_hour_usd))
        return to_money((vcpu + memory) / _SECONDS_PER_HOUR)


def tool_run_row(
    run: FinishedRun, ts: datetime, price: RunnerPrice, row_id: str | None = None
) -> UsageRow:
    """The run's row, checked (ValueError: the `usage` table would refuse it)."""
    billed_s = price.billed_s(run.duration_s)
    vcpu_seconds, gb_seconds = run.vcpu * billed_s, run.memory_gb * billed_s
    cost = price.cost_usd(vcpu_seconds, gb_seconds)
    is_ok = run.status == RunStatus.SUCCEEDED
    return UsageRow(
        id=row_id or usage_row_id(f"tool-run/{run.run_id}", 0),
        ts=ts,
        tenant=run.tenant,
        key_id=run.key_id,
        session_id=run.session_id or None,
        model=run.tool,
        backend=TOOL_RUN_BACKEND.format(runner=run.runner),
        request_id=run.run_id,
        status="ok" if is_ok else "error",
        error_kind=None if is_ok else run.status.value,
        latency_ms=run.duration_s * 1000.0,
        door=run.door,
        cost_usd=cost,
        uncached_cost_usd=cost,  # no prompt cache: nothing saved, nothing lost
        kind="tool_run",
        vcpu_seconds=vcpu_seconds,
        gb_seconds=gb_seconds,
    )


class ToolRunLedger:
    """`RunMeter` over the usage recorder's spool; `prices` per runner (`local`, `fargate`),
    `now` the wall clock (aware UTC datetimes)."""

    def __init__(
        self,
        sink: LineSink,
        now: Callable[[], datetime],
        prices: Mapping[str, RunnerPrice],
    ) -> None:
        self._sink = sink
        self._now = now
        self._prices = dict(prices)

    def record(self, run: FinishedRun) -> None:
        """A run whose row cannot be made is logged whole (no arguments, no output in it); one
        whose only fault is its session (a door that let an unusable one through) is billed
        without it: the session labels a bill, it must not lose it."""
        price = self._prices.get(run.runner, RunnerPrice())
        try:
            try:
                row = tool_run_row(run, self._now(), price)
            except ValueError:
                if run.session_id is None:
                    raise
                row = tool_run_row(replace(run, session_id=None), self._now(), price)
                log.warning("usage ledger: tool run %s billed without its session", run.run_id)
        except Exception:  # noqa: BLE001 - a bug must not fail the run it records
            log.exception("usage ledger: unusable tool run, kept only in this log: %r", run)
            return
        self._sink.record_line(row.to_line())
