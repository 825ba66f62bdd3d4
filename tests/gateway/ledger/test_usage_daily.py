"""The daily rollup (`usage_daily`): kept by the database as rows are inserted, read for whole
days, topped up from `usage` for partial days, and equal to the ledger to the 1e-8 dollar."""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from alembic import command

from gateway.ledger.daily import whole_days
from gateway.ledger.db import alembic_config, create_ledger_engine, migrate, session_factory
from gateway.ledger.models import UsageRow
from gateway.ledger.queries import LedgerQueries
from gateway.ledger.usage_insert import insert_rows

NOW = datetime(2026, 11, 20, 15, 42, 7, tzinfo=UTC)  # "today" is the partial day 2026-11-20
SINCE = datetime(2026, 11, 13, 9, 15, tzinfo=UTC)  # a partial first day too
KEYS = ["tenant", "model", "backend", "key", "day"]


def rows_over(days: int, n: int, seed: int, make_row, parts: bool = True) -> list[UsageRow]:
    """`parts`: with 1 h cache writes and reasoning tokens (columns since migration 0009)."""
    rng = random.Random(seed)
    span = days * 86400
    rows = []
    for _ in range(n):
        write, output = rng.randrange(5000), rng.randrange(1000)
        rows.append(
            make_row(
                ts=NOW - timedelta(seconds=rng.randrange(1, span)),
                tenant=rng.choice(["acme", "globex"]),
                model=rng.choice(["m1", "m2"]),
                backend=rng.choice(["b1", None]),
                key_id=rng.choice(["k1", "k2"]),
                input_tokens=rng.randrange(10_000),
                cache_read_tokens=rng.randrange(10_000),
                cache_write_tokens=write,
                cache_write_1h_tokens=rng.randrange(write + 1) if parts else 0,
                output_tokens=output,
                reasoning_tokens=rng.randrange(output + 1) if parts else 0,
                cost_usd=Decimal(rng.randrange(10**7)) / 10**8,
                uncached_cost_usd=Decimal(rng.randrange(10**8)) / 10**8,
            )
        )
    return rows


def ledger_sums(rows, since, until, keys):
    """What the report must say, summed here from the rows themselves."""
    sums: dict[tuple[str, ...], list] = defaultdict(
        lambda: [0, 0, 0, Decimal(0), Decimal(0), 0, 0, 0, 0]
    )
    values = {
        "tenant": lambda r: r.tenant,
        "model": lambda r: r.model,
        "backend": lambda r: r.backend or "(none)",
        "key": lambda r: r.key_id,
        "day": lambda r: r.ts.date().isoformat(),
        "month": lambda r: r.ts.strftime("%Y-%m"),
    }
    for r in {r.id: r for r in rows}.values():
        if since <= r.ts < until:
            s = sums[tuple(values[k](r) for k in keys)]
            s[0] += 1
            s[1] += r.input_tokens
            s[2] += r.cache_read_tokens
            s[3] += r.cost_usd
            s[4] += r.uncached_cost_usd
            s[5] += r.cache_write_tokens
            s[6] += r.cache_write_1h_tokens
            s[7] += r.output_tokens
            s[8] += r.reasoning_tokens
    return dict(sums)


def report_sums(queries, since, until, keys):
    return {
        t.group: [t.num_calls, t.input_tokens, t.cache_read_tokens, t.cost_usd,
                  t.uncached_cost_usd, t.cache_write_tokens, t.cache_write_1h_tokens,
                  t.output_tokens, t.reasoning_tokens]
        for t in queries.usage_totals(since, until, keys)
    }  # fmt: skip


def daily_table(engine) -> tuple[int, Decimal]:
    with engine.connect() as db:
        calls, units = db.execute(
            sa.text("SELECT sum(num_calls), sum(cost_e8) FROM usage_daily")
        ).one()
    return int(calls or 0), Decimal(int(units or 0)) / 10**8


def test_whole_days_of_a_window():
    assert whole_days(SINCE, NOW) == (
        datetime(2026, 11, 14, tzinfo=UTC),
        datetime(2026, 11, 20, tzinfo=UTC),
    )
    midnight = datetime(2026, 11, 14, tzinfo=UTC)
    assert whole_days(midnight, midnight + timedelta(days=1)) == (
        midnight,
        midnight + timedelta(days=1),
    )
    assert whole_days(SINCE, SINCE + timedelta(hours=20)) is None


@pytest.mark.parametrize("keys", [KEYS, ["tenant"], ["month", "key"], []])
def test_rollup_report_equals_the_ledger_including_today_and_late_rows(engine, make_row, keys):
    queries = LedgerQueries(session_factory(engine))
    first = rows_over(10, 400, 1, make_row)
    insert_rows(engine, first)
    assert report_sums(queries, SINCE, NOW, keys) == ledger_sums(first, SINCE, NOW, keys)
    # rows written after: late ones into days already summed, today's, and a retried batch
    later = rows_over(10, 150, 2, make_row)
    insert_rows(engine, later)
    insert_rows(engine, first[:50] + later[:50])  # written twice, stored (and summed) once
    every = first + later
    assert report_sums(queries, SINCE, NOW, keys) == ledger_sums(every, SINCE, NOW, keys)
    whole = ledger_sums(every, datetime(2000, 1, 1, tzinfo=UTC), NOW, [])[()]
    assert daily_table(engine) == (whole[0], whole[3])


def test_deleted_and_updated_rows_leave_the_rollup_as_the_ledger(engine, make_row):
    rows = rows_over(10, 300, 6, make_row)
    insert_rows(engine, rows)
    gone = {r.id for r in rows[:40]}
    moved = {r.id for r in rows[40:60]}
    with engine.begin() as db:  # a retention purge, and a correction by hand
        db.execute(
            sa.text("DELETE FROM usage WHERE id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": sorted(gone)},
        )
        db.execute(
            sa.text(
                "UPDATE usage SET tenant = 'initech', cost_usd = cost_usd + 1 WHERE id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": sorted(moved)},
        )
    kept = [
        dataclasses.replace(r, tenant="initech", cost_usd=r.cost_usd + 1) if r.id in moved else r
        for r in rows
        if r.id not in gone
    ]
    queries = LedgerQueries(session_factory(engine))
    assert report_sums(queries, SINCE, NOW, KEYS) == ledger_sums(kept, SINCE, NOW, KEYS)
    whole = ledger_sums(kept, datetime(2000, 1, 1, tzinfo=UTC), NOW, [])[()]
    assert daily_table(engine) == (whole[0], whole[3])


def test_a_window_inside_one_day_reads_the_ledger_alone(engine, make_row):
    rows = rows_over(2, 200, 3, make_row)
    insert_rows(engine, rows)
    since, until = NOW - timedelta(hours=5), NOW - timedelta(hours=1)
    assert report_sums(LedgerQueries(session_factory(engine)), since, until, ["tenant"]) == (
        ledger_sums(rows, since, until, ["tenant"])
    )


def test_month_spend_reads_the_rollup_and_today(engine, make_row):
    rows = rows_over(25, 300, 4, make_row)
    insert_rows(engine, rows)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    expected = ledger_sums(rows, start, NOW, ["tenant"])
    spend = LedgerQueries(session_factory(engine)).month_spend_by_tenant(NOW)
    assert spend == {tenant: float(s[3]) for (tenant,), s in expected.items()}


def insert_old_rows(engine: sa.Engine, rows: list[UsageRow]) -> None:
    """The rows as a ledger at an older revision holds them: only the columns it has."""
    table = sa.Table("usage", sa.MetaData(), autoload_with=engine)
    values = [{k: v for k, v in row.to_values().items() if k in table.c} for row in rows]
    with engine.begin() as connection:
        connection.execute(table.insert(), values)


def test_the_migration_sums_the_rows_already_in_the_ledger(database_url, make_row):
    migrate(database_url, "0004")
    engine = create_ledger_engine(database_url)
    rows = rows_over(5, 120, 5, make_row, parts=False)
    insert_old_rows(engine, rows)
    migrate(database_url)
    total = ledger_sums(rows, datetime(2000, 1, 1, tzinfo=UTC), NOW, [])[()]
    assert daily_table(engine) == (total[0], total[3])
    queries = LedgerQueries(session_factory(engine))
    assert report_sums(queries, SINCE, NOW, KEYS) == ledger_sums(rows, SINCE, NOW, KEYS)
    engine.dispose()


def test_the_token_kinds_migration_keeps_the_sums_and_adds_its_own(database_url, make_row):
    """0008 -> 0009: the rows and sums already stored are kept (their new kinds read 0); rows
    written after carry 1 h cache writes and reasoning tokens into the rollup, as the triggers
    made again at 0009 sum them; a downgrade to 0008 keeps the rollup summing what it has."""
    migrate(database_url, "0008")
    engine = create_ledger_engine(database_url)
    old = rows_over(5, 100, 7, make_row, parts=False)
    insert_old_rows(engine, old)
    migrate(database_url)
    new = rows_over(5, 100, 8, make_row)
    assert any(r.reasoning_tokens for r in new) and any(r.cache_write_1h_tokens for r in new)
    insert_rows(engine, new)
    queries = LedgerQueries(session_factory(engine))
    assert report_sums(queries, SINCE, NOW, KEYS) == ledger_sums(old + new, SINCE, NOW, KEYS)
    with engine.connect() as db:
        kinds = db.execute(
            sa.text("SELECT sum(cache_write_1h_tokens), sum(reasoning_tokens) FROM usage_daily")
        ).one()
    assert tuple(int(k) for k in kinds) == (
        sum(r.cache_write_1h_tokens for r in new),
        sum(r.reasoning_tokens for r in new),
    )
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0008")
    later = rows_over(5, 50, 9, make_row, parts=False)
    insert_old_rows(engine, later)
    total = ledger_sums(old + new + later, datetime(2000, 1, 1, tzinfo=UTC), NOW, [])[()]
    assert daily_table(engine) == (total[0], total[3])
    engine.dispose()
