"""`CallLedger`: the pipeline's `LedgerPort`, turning a `CallRecord` into a `UsageRow`.

The row id is derived from (request id, attempt), so recording the same attempt twice stores it
once. Never blocks: it only hands the row to the recorder.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from gateway.ids import uuid5_in, uuid5_namespace
from gateway.ledger.models import CallStatus, UsageRow
from gateway.ports import CallRecord

log = logging.getLogger(__name__)
ROW_ID_NAMESPACE = uuid.UUID("6d1c4a52-3f0e-4b8e-9a57-0c1f2e9b7d41")
_ROW_ID_HASH = uuid5_namespace(ROW_ID_NAMESPACE)  # copied for each id, never updated


class RowSink(Protocol):
    def record(self, row: UsageRow) -> None: ...


def usage_row_id(request_id: str, attempt: int) -> str:
    """`str(uuid.uuid5(ROW_ID_NAMESPACE, "<request id>/<attempt>"))`: the row's idempotency
    key, so its value may never change (rows already stored or spooled carry it)."""
    return uuid5_in(_ROW_ID_HASH, f"{request_id}/{attempt}")


def usage_row(call: CallRecord, ts: datetime) -> UsageRow:
    """The call's row; `UsageRow` checks every value, the status among them."""
    usage = call.usage
    status: CallStatus = call.status  # type: ignore[assignment]  # UsageRow refuses any other
    saved, premium, lost = call.cache_saved_usd, call.cache_premium_usd, call.cache_lost_usd
    # dollars as floats: the row's __post_init__ turns each into exact money once
    money: dict[str, Any] = {
        "cost_usd": call.cost_usd,
        "uncached_cost_usd": call.uncached_cost_usd,
        # clamped as `max(x, 0.0)` is, without its call (NaN and -0.0 kept): a price override
        # that makes a read dearer than input must not lose the row
        "cache_saved_usd": 0.0 if saved < 0.0 else saved,
        "cache_premium_usd": 0.0 if premium < 0.0 else premium,
        "cache_lost_usd": 0.0 if lost < 0.0 else lost,
    }
    return UsageRow(
        id=uuid5_in(_ROW_ID_HASH, f"{call.request_id}/{call.attempt}"),  # usage_row_id
        ts=ts,
        tenant=call.tenant,
        key_id=call.key_id,
        session_id=call.session_id,
        model=call.model,
        backend=call.backend or None,
        replica=call.replica,
        attempt=call.attempt,
        status=status,
        error_kind=call.error_kind,
        request_id=call.request_id,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        ttft_ms=call.ttft_ms,
        latency_ms=call.latency_ms,
        cache_diagnosis=call.cache_diagnosis,
        door=call.door,
        cache_cause=call.cache_cause,
        queue_ms=call.queue_ms,
        **money,
    )


class CallLedger:
    """`LedgerPort` over a `UsageRecorder`; `now` is the wall clock (aware UTC datetimes)."""

    def __init__(self, sink: RowSink, now: Callable[[], datetime]) -> None:
        self._sink = sink
        self._now = now

    def record(self, row: CallRecord) -> None:
        """Never raises into the pipeline: a row the ledger cannot take is logged whole instead."""
        ts = self._now()
        usage: UsageRow | None
        try:
            usage = usage_row(row, ts)
        except ValueError:
            usage = self._without_diagnosis(row, ts)
        if usage is not None:
            self._sink.record(usage)

    def _without_diagnosis(self, row: CallRecord, ts: datetime) -> UsageRow | None:
        if row.cache_diagnosis is not None:
            try:
                fixed = usage_row(replace(row, cache_diagnosis=None), ts)
            except ValueError:
                pass
            else:
                log.warning(
                    "usage ledger: dropped the invalid cache diagnosis of %s", row.request_id
                )
                return fixed
        log.exception("usage ledger: unusable call record, kept only in this log: %r", row)
        return None
