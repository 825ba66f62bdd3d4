"""What the daily rollup's trigger costs the ledger writer: inserts `--rows` usage rows in the
recorder's batches (`insert_rows`, 500 a batch) into a ledger migrated to 0004 (no rollup) and
into one at head (usage_daily kept by its trigger), and prints rows per second for each.

    .venv/bin/python -m bench.ledger_rollup_writes [--rows 20000] [--database-url URL]

A PostgreSQL URL should name a schema of its own (`?options=-csearch_path%3Dname`): the bench
drops the ledger's tables there between the two runs.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa

from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows

BATCH = 500


def rows(n: int, now: datetime) -> list[UsageRow]:
    rng = random.Random(11)
    return [
        UsageRow(
            id=f"w-{i:09d}", ts=now - timedelta(seconds=rng.randrange(86400 * 30)),
            tenant=f"t{rng.randrange(20):02d}", key_id=f"k{rng.randrange(3)}",
            model=rng.choice(["a", "b", "c", "d"]), backend="b", request_id=f"r{i}",
            status="ok", input_tokens=1000, output_tokens=200,
            cost_usd=Decimal(rng.randrange(10**6)) / 10**8,
        )
        for i in range(n)
    ]  # fmt: skip


def rows_per_s(url: str, revision: str, batch: list[UsageRow]) -> float:
    engine = create_ledger_engine(url)
    with engine.begin() as db:  # a fresh ledger each time
        for table in ("usage_daily", "api_keys", "admin_audit", "usage", "alembic_version"):
            db.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        if engine.dialect.name == "postgresql":
            for function in ("usage_daily_add", "usage_daily_remove", "usage_daily_change"):
                db.execute(sa.text(f"DROP FUNCTION IF EXISTS {function}()"))
    migrate(url, revision)
    start = time.perf_counter()
    for first in range(0, len(batch), BATCH):
        insert_rows(engine, batch[first : first + BATCH])
    elapsed = time.perf_counter() - start
    engine.dispose()
    return len(batch) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp())}/ledger.db"
    batch = rows(args.rows, datetime.now(UTC))
    result = {
        "database": url.split(":")[0],
        "rows": args.rows,
        "batch": BATCH,
        "without_rollup_rows_per_s": round(rows_per_s(url, "0004", batch)),
        "with_rollup_rows_per_s": round(rows_per_s(url, "head", batch)),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
