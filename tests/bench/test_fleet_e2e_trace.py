"""The end-to-end bench's per-call trace (`--trace`): replicas joined from the ledger, calls in
flight on the replica at dispatch, session moves, the slowest 5 % marked."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.fleet_e2e import Call, attach_replicas, trace_report


def test_replicas_come_from_the_ledger_by_request_id(tmp_path: Path) -> None:
    db = tmp_path / "lantern.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE usage (request_id TEXT, replica TEXT, status TEXT)")
        conn.executemany(
            "INSERT INTO usage VALUES (?, ?, ?)",
            [
                ("r1", "engine@http://127.0.0.1:4001/v1", "ok"),
                ("r2", "engine@http://127.0.0.1:4002/v1", "ok"),
                ("r3", "engine@http://127.0.0.1:4001/v1", "error"),
            ],
        )
    calls = [Call("s", 0.0, 1.0, 10, 0, rid) for rid in ("r1", "r2", "r3", "r4")]
    attach_replicas(calls, db)
    assert [c.replica for c in calls] == ["4001", "4002", "?", "?"]


def test_trace_counts_in_flight_moves_and_marks_the_tail() -> None:
    calls = [
        Call("a", 0.0, 2.0, 100, 0, "1", "p1"),
        Call("b", 0.5, 0.4, 100, 0, "2", "p1"),  # a is in flight on p1
        Call("b", 1.0, 0.3, 120, 96, "3", "p2"),  # b moves; a is on p1, not p2
        Call("a", 2.5, 3.0, 140, 112, "4", "p1"),
    ]
    out = trace_report(calls)
    rows = [line for line in out if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[3] for r in rows] == ["0", "1", "0", "0"]
    assert [r.rstrip(" |").endswith("yes") for r in rows] == [False, False, True, False]
    # the bench's p95 of four calls is the third fastest (2.0 s): both calls of 2 s and more
    assert ["(p95+)" in r for r in rows] == [True, False, False, True]
    assert out[-1] == "session moves: 1"
    assert "replica p1: 3 calls, prompt 340, cached 112, latency sum 5.4 s" in out
