"""Prometheus view of a `UsageRecorder` and of the SQLite ledger file, read at scrape time (no
module state). Register on the app's registry: `registry.register(RecorderCollector(recorder))`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.ledger.recorder import UsageRecorder
from gateway.ledger.sqlite_file import LedgerFileWatch


class RecorderCollector(Collector):
    def __init__(self, recorder: UsageRecorder) -> None:
        self._recorder = recorder

    def collect(self) -> Iterator[Metric]:
        s = self._recorder.stats()
        for name, help_text, value in (
            ("recorded", "Usage rows handed to the ledger", s.num_recorded),
            ("written", "Usage rows sent to the database", s.num_written),
            ("spooled", "Usage rows written to the on-disk spool", s.num_spooled),
            ("overflowed", "Usage rows kept only in the ERROR log: spool full", s.num_overflowed),
            (
                "rejected",
                "Usage rows kept only in the ERROR log: refused by the database",
                s.num_rejected,
            ),
        ):
            yield CounterMetricFamily(f"lantern_ledger_rows_{name}", help_text, value=value)
        yield GaugeMetricFamily(
            "lantern_ledger_rows_pending", "Usage rows waiting in memory", value=s.num_pending
        )
        yield GaugeMetricFamily(
            "lantern_ledger_spool_bytes", "Bytes in the on-disk spool", value=s.spool_bytes
        )
        yield GaugeMetricFamily(
            "lantern_ledger_database_up",
            "1 while the ledger database accepts writes",
            value=1.0 if s.is_database_up else 0.0,
        )


class LedgerFileCollector(Collector):
    def __init__(self, watch: LedgerFileWatch) -> None:
        self._watch = watch

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "lantern_ledger_file_intact",
            "1 while the SQLite ledger file and its -wal are the ones the gateway writes to",
            value=0.0 if self._watch.problems() else 1.0,
        )
