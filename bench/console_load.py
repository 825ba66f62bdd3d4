"""Page load of the console's spend view over a large ledger: seeds `--rows` usage rows over the
last 30 days (SQLite file by default, or `--database-url`), starts the real gateway app under
uvicorn, logs in, and times GET /console/spend over HTTP. Records the row count and the plan of
every ledger query the last page load sent (EXPLAIN QUERY PLAN on SQLite, EXPLAIN (ANALYZE,
BUFFERS) on PostgreSQL).

    .venv/bin/python -m bench.console_load [--rows 1000000] [--loads 5] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import uvicorn

from gateway.app import create_app
from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import USAGE_TABLE
from gateway.settings import Settings

TOKEN = "bench-admin-token"
TENANTS = [f"t{i:02d}" for i in range(20)]
MODELS = ["gpt-4o-mini", "claude-sonnet", "smollm2", "llama-70b"]
BATCH = 20_000


def seed(database_url: str, num_rows: int, now: datetime) -> int:
    migrate(database_url)
    engine = create_ledger_engine(database_url)
    rng = random.Random(7)
    start = now - timedelta(days=30)
    span_s = int((now - start).total_seconds()) - 1
    with engine.begin() as db:
        db.execute(USAGE_TABLE.delete())
        db.execute(sa.text("DELETE FROM usage_daily"))  # usage's triggers keep it from here
    # a ledger is appended in time order: rows i are spread evenly over the window, in order
    step_s = span_s / max(num_rows, 1)
    for first in range(0, num_rows, BATCH):
        last = min(first + BATCH, num_rows)
        batch = [_row(i, start + timedelta(seconds=i * step_s), rng) for i in range(first, last)]
        with engine.begin() as db:
            db.execute(USAGE_TABLE.insert(), batch)
    with engine.begin() as db:  # committed: PostgreSQL's statistics are transactional
        count = db.execute(sa.text("SELECT count(*) FROM usage")).scalar_one()
        if engine.dialect.name == "postgresql":
            db.execute(sa.text("ANALYZE usage"))
        else:
            db.execute(sa.text("ANALYZE"))
    engine.dispose()
    return int(count)


def _row(i: int, ts: datetime, rng: random.Random) -> dict[str, object]:
    tenant = rng.choice(TENANTS)
    cost = round(rng.random() / 100, 8)
    return {
        "id": f"bench-{i:012d}", "ts": ts,
        "tenant": tenant, "key_id": f"{tenant}-k{rng.randrange(3)}",
        "session_id": f"s{rng.randrange(50_000)}", "model": rng.choice(MODELS),
        "backend": "b", "replica": None, "attempt": 0, "status": "ok", "error_kind": None,
        "input_tokens": 1000, "cache_read_tokens": 4000, "cache_write_tokens": 0,
        "output_tokens": 200, "cost_usd": cost, "uncached_cost_usd": cost * 3, "ttft_ms": 100.0,
        "latency_ms": 500.0, "cache_diagnosis": None, "request_id": f"r{i}",
    }  # fmt: skip


class StatementLog:
    """The SQL statements (and parameters) the gateway sends while `recording`: the spend page's
    own queries, so their plans are the plans of what the page ran."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []
        self.recording = False
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn, _cursor, statement, parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        if self.recording and "usage" in statement:
            self.statements.append((statement, parameters))


def query_plans(database_url: str, statements: list[tuple[str, Any]]) -> list[list[str]]:
    """Each statement's plan: EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL, EXPLAIN QUERY PLAN on
    SQLite."""
    engine = create_ledger_engine(database_url)
    postgres = engine.dialect.name == "postgresql"
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if postgres else "EXPLAIN QUERY PLAN "
    plans = []
    raw = engine.raw_connection()
    try:
        for statement, parameters in statements:
            cursor = raw.cursor()
            cursor.execute(prefix + statement, parameters)
            plans.append([" | ".join(str(c) for c in row) for row in cursor.fetchall()])
            cursor.close()
    finally:
        raw.close()
        engine.dispose()
    return plans


def count_rows(database_url: str, table: str) -> int:
    engine = create_ledger_engine(database_url)
    with engine.connect() as db:
        count = db.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
    engine.dispose()
    return int(count)


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    var = Path(tempfile.mkdtemp(prefix="console-load-"))
    url = args.database_url or f"sqlite:///{var}/lantern.db"
    now = datetime.now(UTC)
    t0 = time.perf_counter()
    count = seed(url, args.rows, now)
    seed_s = time.perf_counter() - t0
    (var / "policies").mkdir()
    settings = Settings.model_validate(
        {"database_url": url, "var_dir": var, "policy_dir": var / "policies",
         "admin_token": TOKEN, "server_secret": "bench", "telemetry": {"exporter": "none"}}
    )  # fmt: skip
    server, thread, base = serve(settings)
    times = []
    log = StatementLog()
    with httpx.Client(base_url=base, timeout=60) as client:
        client.post("/console/login", data={"token": TOKEN})
        since = (now - timedelta(days=30)).date().isoformat()
        for i in range(args.loads):
            log.recording = i == args.loads - 1  # the last load's statements
            t = time.perf_counter()
            reply = client.get(f"/console/spend?since={since}")
            times.append(time.perf_counter() - t)
            assert reply.status_code == 200 and "<svg" in reply.text, reply.status_code
        log.recording = False
    server.should_exit = True
    thread.join(timeout=10)
    print(json.dumps({
        "database": url.split(":")[0], "rows": count,
        "usage_daily_rows": count_rows(url, "usage_daily"), "seed_s": round(seed_s, 1),
        "spend_page_s": {"min": round(min(times), 3), "median": round(statistics.median(times), 3),
                         "max": round(max(times), 3), "loads": len(times)},
        "statements": [statement for statement, _ in log.statements],
        "query_plans": query_plans(url, log.statements),
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
