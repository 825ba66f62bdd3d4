"""CallLedger: the pipeline's CallRecord becomes one idempotent usage row, and never raises."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import sqlalchemy as sa

from adapters.types import Usage
from gateway.ledger.call_ledger import CallLedger, usage_row_id
from gateway.ledger.models import UsageRow
from gateway.ledger.recorder import RecorderConfig, UsageRecorder
from gateway.ports import CallRecord

NOW = datetime(2026, 11, 3, 9, 30, tzinfo=UTC)

CALL = CallRecord(
    request_id="req-42",
    attempt=1,
    tenant="acme",
    key_id="key-7",
    session_id="s-1",
    model="claude-sonnet",
    backend="anthropic",
    replica=None,
    status="client_disconnect",
    error_kind=None,
    usage=Usage(
        input_tokens=120,
        output_tokens=37,
        cache_read_tokens=6000,
        cache_write_tokens=800,
        cache_write_1h_tokens=500,  # of the writes
        reasoning_tokens=20,  # of the output
    ),
    cost_usd=0.002715,
    uncached_cost_usd=0.018915,
    ttft_ms=210.5,
    latency_ms=1830.0,
    cache_diagnosis='{"verdict":"hit"}',
)


class ListSink:
    """Reads each line back as the recorder's writer does (`UsageRow.from_line`)."""

    def __init__(self) -> None:
        self.rows: list[UsageRow] = []

    def record_line(self, line: bytes) -> None:
        self.rows.append(UsageRow.from_line(line))


def test_call_record_maps_to_a_usage_row():
    sink = ListSink()
    CallLedger(sink, lambda: NOW).record(CALL)
    assert sink.rows == [
        UsageRow(
            id=usage_row_id("req-42", 1),
            ts=NOW,
            tenant="acme",
            key_id="key-7",
            session_id="s-1",
            model="claude-sonnet",
            backend="anthropic",
            replica=None,
            attempt=1,
            status="client_disconnect",
            error_kind=None,
            request_id="req-42",
            input_tokens=120,
            cache_read_tokens=6000,
            cache_write_tokens=800,
            cache_write_1h_tokens=500,
            output_tokens=37,
            reasoning_tokens=20,
            cost_usd=Decimal("0.002715"),
            uncached_cost_usd=Decimal("0.018915"),
            ttft_ms=210.5,
            latency_ms=1830.0,
            cache_diagnosis='{"verdict":"hit"}',
        )
    ]
    assert usage_row_id("req-42", 1) != usage_row_id("req-42", 2)


def test_recording_the_same_attempt_twice_stores_one_row(engine, tmp_path, count_rows):
    recorder = UsageRecorder(engine, RecorderConfig(spool_dir=tmp_path / "spool"))
    recorder.start()
    ledger = CallLedger(recorder, lambda: NOW)
    ledger.record(CALL)
    ledger.record(CALL)
    ledger.record(replace(CALL, attempt=2, status="ok"))
    recorder.close()
    assert count_rows(engine) == 2
    with engine.connect() as connection:
        sums = "SELECT sum(output_tokens), sum(reasoning_tokens), sum(cache_write_1h_tokens) FROM "
        stored = connection.execute(sa.text(sums + "usage")).one()
        daily = connection.execute(sa.text(sums + "usage_daily")).one()
    assert tuple(stored) == tuple(daily) == (74, 40, 1000)


def test_an_invalid_diagnosis_is_dropped_not_the_row():
    sink = ListSink()
    CallLedger(sink, lambda: NOW).record(replace(CALL, cache_diagnosis="not json"))
    assert [(r.request_id, r.cache_diagnosis) for r in sink.rows] == [("req-42", None)]


def test_an_unusable_record_is_logged_whole_counted_and_never_raised(
    engine, tmp_path, count_rows, caplog
):
    recorder = UsageRecorder(engine, RecorderConfig(spool_dir=tmp_path / "spool"))
    recorder.start()
    ledger = CallLedger(recorder, lambda: NOW)
    ledger.record(replace(CALL, status="exploded"))  # refused where the writer reads it
    ledger.record(replace(CALL, attempt=2))
    recorder.close()
    assert count_rows(engine) == 1
    stats = recorder.stats()
    assert (stats.num_rejected, stats.num_written, stats.spool_bytes) == (1, 1, 0)
    assert "kept only in this log" in caplog.text and '"status":"exploded"' in caplog.text
