"""`CallLedger`: the pipeline's `LedgerPort`, turning a `CallRecord` into a `UsageRow`.

The row id is derived from (request id, attempt), so recording the same attempt twice stores it
once. Never blocks: it only hands the row's spool line to the recorder, which checks the row
on its own thread.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

import orjson

from gateway.ids import uuid5_in, uuid5_namespace
from gateway.ledger.models import UsageRow
from gateway.ports import CallRecord

log = logging.getLogger(__name__)
ROW_ID_NAMESPACE = uuid.UUID("6d1c4a52-3f0e-4b8e-9a57-0c1f2e9b7d41")
_ROW_ID_HASH = uuid5_namespace(ROW_ID_NAMESPACE)  # copied for each id, never updated


class LineSink(Protocol):
    def record_line(self, line: bytes) -> None: ...


def usage_row_id(request_id: str, attempt: int) -> str:
    """`str(uuid.uuid5(ROW_ID_NAMESPACE, "<request id>/<attempt>"))`: the row's idempotency
    key, so its value may never change (rows already stored or spooled carry it)."""
    return uuid5_in(_ROW_ID_HASH, f"{request_id}/{attempt}")


def call_values(call: CallRecord, ts: datetime) -> dict[str, Any]:
    """The call's row as plain values, unchecked: money as floats (`UsageRow` turns each into
    exact money, and refuses any value the `usage` table would)."""
    usage = call.usage
    saved, premium, lost = call.cache_saved_usd, call.cache_premium_usd, call.cache_lost_usd
    return {
        "id": uuid5_in(_ROW_ID_HASH, f"{call.request_id}/{call.attempt}"),  # usage_row_id
        "ts": ts,
        "tenant": call.tenant,
        "key_id": call.key_id,
        "session_id": call.session_id,
        "model": call.model,
        "backend": call.backend or None,
        "replica": call.replica,
        "attempt": call.attempt,
        "status": call.status,
        "error_kind": call.error_kind,
        "request_id": call.request_id,
        "input_tokens": usage.input_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "output_tokens": usage.output_tokens,
        "cache_write_1h_tokens": usage.cache_write_1h_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "ttft_ms": call.ttft_ms,
        "latency_ms": call.latency_ms,
        "cache_diagnosis": call.cache_diagnosis,
        "door": call.door,
        "cache_cause": call.cache_cause,
        "queue_ms": call.queue_ms,
        "cost_usd": call.cost_usd,
        "uncached_cost_usd": call.uncached_cost_usd,
        # clamped as `max(x, 0.0)` is, without its call (NaN and -0.0 kept): a price override
        # that makes a read dearer than input must not lose the row
        "cache_saved_usd": 0.0 if saved < 0.0 else saved,
        "cache_premium_usd": 0.0 if premium < 0.0 else premium,
        "cache_lost_usd": 0.0 if lost < 0.0 else lost,
    }


def usage_row(call: CallRecord, ts: datetime) -> UsageRow:
    """The call's row, checked (ValueError: the `usage` table would refuse it)."""
    return UsageRow(**call_values(call, ts))


def call_line(call: CallRecord, ts: datetime) -> bytes:
    """The call's spool line, unchecked: `UsageRow.from_line` reads and checks it where rows
    are written (the recorder's thread, in a batch), not here: a call pays for its line only."""
    values = call_values(call, ts)
    try:
        return orjson.dumps(values, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # a value orjson refuses (a lone surrogate): the standard library's escapes
        values["ts"] = ts.isoformat()
        return (json.dumps(values, separators=(",", ":"), default=str) + "\n").encode()


class CallLedger:
    """`LedgerPort` over a `UsageRecorder`; `now` is the wall clock (aware UTC datetimes).

    A row the `usage` table would refuse is refused where the recorder writes rows (logged
    whole and counted, as a row the database refuses); one whose only fault is its cache
    diagnosis is stored without it."""

    def __init__(self, sink: LineSink, now: Callable[[], datetime]) -> None:
        self._sink = sink
        self._now = now

    @property
    def sink(self) -> LineSink:
        """Where its rows go (tool runs are billed through the same recorder)."""
        return self._sink

    def record(self, row: CallRecord) -> None:
        """Never raises into the pipeline: a record that cannot even be written is logged."""
        try:
            line = call_line(row, self._now())
        except Exception:  # noqa: BLE001 - a bug must not fail the call it records
            log.exception("usage ledger: unusable call record, kept only in this log: %r", row)
            return
        self._sink.record_line(line)
