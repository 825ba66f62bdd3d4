"""`UsageRecorder`: takes usage rows without waiting on the database and gets each one into it.

`record()` appends the row to this process's spool segment (one write(2), no fsync: the row then
survives the death of the process) and queues it in memory; one writer thread batches inserts
(idempotent by row id) and removes segments whose rows are all stored. While the database is
unreachable (or not yet migrated: `prepare`) the rows wait in the spool, retried with backoff; the
segments of processes that died are drained at start-up. A full spool is the one loss path: an
overflow row that cannot reach the database is logged whole at ERROR (it holds no prompt text, so
it can be re-imported from the log) and counted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from gateway.ledger.models import UsageRow
from gateway.ledger.spool import DEFAULT_ROTATE_BYTES, Spool
from gateway.ledger.usage_insert import insert_rows, is_row_error

log = logging.getLogger(__name__)
Prepare = Callable[[Engine], None]
_Entry = tuple[int | None, bytes]  # (spool segment number, or None: in memory only; its line)


@dataclass(frozen=True, slots=True)
class RecorderConfig:
    spool_dir: Path
    spool_max_bytes: int = 256 * 1024 * 1024
    spool_rotate_bytes: int = DEFAULT_ROTATE_BYTES
    batch_size: int = 500
    retry_initial_s: float = 0.5
    retry_max_s: float = 30.0
    # once woken, the writer waits this long so one insert carries many rows (a row per
    # insert costs the request path ~0.5 ms of contended CPU at 100 calls/s)
    linger_s: float = 0.05


@dataclass(frozen=True, slots=True)
class RecorderStats:
    """Counters since start. `num_written` counts rows sent to the database (a row re-sent
    after a lost acknowledgement counts twice, is stored once). `num_spooled` counts rows left
    in the spool for a later drain (the database did not take them). `num_overflowed` (not in
    the spool, database down, or recorded after close) and `num_rejected` (refused by the
    row's checks or by the database) rows exist only in the ERROR log. `spool_bytes`: rows
    waiting on disk."""

    num_recorded: int
    num_written: int
    num_spooled: int
    num_overflowed: int
    num_rejected: int
    num_pending: int
    spool_bytes: int
    is_database_up: bool


class UsageRecorder:
    """Call `start()` once, `record()` from anywhere, `aclose()`/`close()` at exit.

    `prepare(engine)` (the migrations) runs in the writer thread before the first insert and
    again after a failure, until it succeeds: the process serves while the database is down.
    """

    def __init__(
        self,
        engine: Engine,
        config: RecorderConfig,
        *,
        prepare: Prepare | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._config = config
        self._prepare = prepare
        self._is_prepared = prepare is None
        self._monotonic = monotonic
        self._spool = Spool(config.spool_dir, config.spool_max_bytes, config.spool_rotate_bytes)
        self._pending: deque[_Entry] = deque()
        # `record` takes the lock itself: a `with` on the lock runs no Python code
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._is_stopping = False
        self._is_closed = False
        self._is_db_up = True
        self._retry_delay_s = config.retry_initial_s
        self._retry_at = 0.0
        self._counts = {"recorded": 0, "written": 0, "spooled": 0, "overflowed": 0, "rejected": 0}
        self._first_drain = threading.Event()

    def start(self) -> None:
        """Opens the spool and starts the writer, which first drains what earlier runs left."""
        if self._thread is not None:
            raise RuntimeError("UsageRecorder already started")
        self._spool.open()
        self._thread = threading.Thread(target=self._run, name="usage-recorder", daemon=True)
        self._thread.start()

    def record(self, row: UsageRow) -> None:
        """`record_line` of the row's line."""
        self.record_line(row.to_line())

    def record_line(self, line: bytes) -> None:
        """Appends a row's spool line (`UsageRow.to_line`, or `call_line`: unchecked) to the
        spool (once this returns, the row survives the process) and queues it for the
        database; never waits on the database. The writer thread reads the line back
        (`UsageRow.from_line`) and checks the row there, in a batch: a row the `usage` table
        would refuse is logged whole and counted rejected. A line recorded before `start()` is
        queued in memory only; one recorded after `close()` is logged whole."""
        with self._lock:
            self._counts["recorded"] += 1
            if not self._is_closed:
                number = self._spool.append(line)  # None before `start()`: memory only
                self._pending.append((number, line))
                n = len(self._pending)
                if n == 1 or n >= self._config.batch_size:  # the writer waits only when empty
                    self._wakeup.notify()
                return
        self._overflow([line], "recorder already closed")

    def stats(self) -> RecorderStats:
        spool_bytes = self._spool.backlog_bytes
        with self._wakeup:
            return RecorderStats(
                num_recorded=self._counts["recorded"],
                num_written=self._counts["written"],
                num_spooled=self._counts["spooled"],
                num_overflowed=self._counts["overflowed"],
                num_rejected=self._counts["rejected"],
                num_pending=len(self._pending),
                spool_bytes=spool_bytes,
                is_database_up=self._is_db_up,
            )

    def close(self) -> None:
        """Writes everything queued (to the database, else leaves it in the spool), then stops."""
        with self._wakeup:
            self._is_closed = True
            self._is_stopping = True
            self._wakeup.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._spool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def wait_first_drain(self, timeout_s: float) -> bool:
        """Blocks until the writer's first `prepare` and drain ended (in success or not)."""
        return self._first_drain.wait(timeout_s)

    # --- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        self._drain_spool()
        self._first_drain.set()
        while True:
            try:
                if self._step():
                    return
            except Exception:  # a bug must not silence the ledger: log it and keep going
                log.exception("usage ledger: writer error")
                time.sleep(self._config.retry_initial_s)

    def _step(self) -> bool:
        """One batch and, when due, one drain; True once stopping with nothing left to write."""
        batch, is_stopping = self._take_batch()
        if batch:
            self._write(batch)
        self._spool.rotate_if_due()
        if self._spool.has_backlog and self._monotonic() >= self._retry_at:
            self._drain_spool()
        if is_stopping and not batch:
            if self._spool.has_backlog:
                self._drain_spool()  # one last try, whatever the backoff says
            return True
        return False

    def _take_batch(self) -> tuple[list[_Entry], bool]:
        with self._wakeup:
            if not self._pending and not self._is_stopping:
                self._wakeup.wait(timeout=self._idle_wait_s())
            if self._pending:  # linger; callers keep appending (the wait releases the lock)
                self._wakeup.wait_for(self._is_due, timeout=self._config.linger_s)
            size = min(len(self._pending), self._config.batch_size)
            return [self._pending.popleft() for _ in range(size)], self._is_stopping

    def _is_due(self) -> bool:
        """The linger ends early: a full batch, or `close()`."""
        return self._is_stopping or len(self._pending) >= self._config.batch_size

    def _idle_wait_s(self) -> float | None:
        if not self._spool.has_backlog:
            return None
        return max(0.0, self._retry_at - self._monotonic())

    def _write(self, batch: list[_Entry]) -> None:
        if not self._is_db_up or self._spool.has_backlog:
            self._leave_in_spool(batch)  # keep the outage's rows together; the drain writes them
            return
        try:
            self._insert(self._rows_of(batch))
        except Exception as error:  # noqa: BLE001 - any failure: keep the rows, retry later
            self._mark_down(error)
            self._leave_in_spool(batch)
            return
        self._spool.acknowledge(Counter(n for n, _ in batch if n is not None))

    def _drain_spool(self) -> None:
        num_rows = 0
        try:
            self._prepare_once()
            for batch in self._spool.read_backlog(self._config.batch_size):
                self._insert(batch)
                num_rows += len(batch)
            self._spool.clear_backlog()
        except Exception as error:  # noqa: BLE001 - the spool keeps them; retry with backoff
            self._spool.release()
            self._mark_down(error)
            return
        if num_rows:
            log.warning("usage ledger: wrote %d spooled rows", num_rows)
        with self._wakeup:
            self._is_db_up = True
        self._retry_delay_s = self._config.retry_initial_s

    def _prepare_once(self) -> None:
        if not self._is_prepared and self._prepare is not None:
            self._prepare(self._engine)
            self._is_prepared = True
            log.info("usage ledger: database ready")

    def _rows_of(self, batch: list[_Entry]) -> list[UsageRow]:
        """The batch's rows; a line whose row the `usage` table would refuse is logged whole
        and counted rejected (its spool line is acknowledged with the others)."""
        rows = []
        for _, line in batch:
            try:
                rows.append(UsageRow.from_line(line))
            except (ValueError, TypeError, KeyError) as error:
                log.error(
                    "usage ledger: unusable row (%s), kept only in this log: %s",
                    error,
                    _text(line),
                )
                self._count("rejected", 1)
        return rows

    def _insert(self, batch: list[UsageRow]) -> None:
        """Inserts `batch`; if the database refuses a row (not the connection), the batch is
        retried row by row so one bad row cannot hold the others back."""
        self._prepare_once()
        try:
            insert_rows(self._engine, batch)
        except Exception as error:
            if not is_row_error(error):
                raise
            for row in batch:
                try:
                    insert_rows(self._engine, [row])
                except Exception as row_error:
                    if not is_row_error(row_error):
                        raise
                    log.error(
                        "usage ledger: database refused a row (%s), kept only in this log: %s",
                        type(row_error).__name__,
                        row.to_json(),
                    )
                    self._count("rejected", 1)
                else:
                    self._count("written", 1)
            return
        self._count("written", len(batch))

    def _mark_down(self, error: Exception) -> None:
        log.warning(
            "usage ledger: database unavailable (%s); spooling, retry in %.1fs",
            type(error).__name__,
            self._retry_delay_s,
        )
        with self._wakeup:
            self._is_db_up = False
        self._retry_at = self._monotonic() + self._retry_delay_s
        self._retry_delay_s = min(self._retry_delay_s * 2, self._config.retry_max_s)

    def _leave_in_spool(self, batch: list[_Entry]) -> None:
        spooled = [n for n, _ in batch if n is not None]
        try:
            self._spool.give_up(spooled)
        except OSError:  # fsync failed: the rows are still in the page cache; say so
            log.exception("usage ledger: spool fsync failed")
        self._count("spooled", len(spooled))
        lost = [line for n, line in batch if n is None]
        if lost:
            self._overflow(lost, "spool full")

    def _overflow(self, lines: list[bytes], reason: str) -> None:
        for line in lines:
            log.error("usage ledger: %s, row kept only in this log: %s", reason, _text(line))
        self._count("overflowed", len(lines))

    def _count(self, name: str, n: int) -> None:
        with self._wakeup:
            self._counts[name] += n


def _text(line: bytes) -> str:
    """A spool line as the log shows it: its JSON, without the newline."""
    return line.decode(errors="backslashreplace").removesuffix("\n")
