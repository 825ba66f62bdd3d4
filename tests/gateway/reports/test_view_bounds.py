"""What one admin reply or console page sends is bounded (MAX_VIEW_ROWS): a spend series by key
over a long period is refused, naming `since`, and the shorter period it asks for is served.
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy.orm import Session, sessionmaker

from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows
from gateway.reports.rows import MAX_VIEW_ROWS, ReportTooLarge, check_view_size
from gateway.reports.spend import spend_series

FIRST_DAY = datetime(2025, 1, 1, 12, tzinfo=UTC)
NUM_DAYS = 100  # key k-000 calls once a day
NUM_KEYS = 101  # and 100 more keys call on the first day: 100 days x 101 keys to send


def key_rows() -> list[UsageRow]:
    daily = [(FIRST_DAY + timedelta(days=d), "k-000") for d in range(NUM_DAYS)]
    first_day = [(FIRST_DAY, f"k-{n:03d}") for n in range(1, NUM_KEYS)]
    return [
        UsageRow(id=f"00000000-0000-0000-0000-{n:012d}", ts=ts, tenant="acme", key_id=key_id,
                 model="gpt-4o-mini", request_id=f"r-{n}", status="ok", cost_usd=Decimal("0.01"))
        for n, (ts, key_id) in enumerate([*daily, *first_day])
    ]  # fmt: skip


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sessions(request: pytest.FixtureRequest, tmp_path) -> Iterator[sessionmaker[Session]]:
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/ledger.db"
    migrate(url)
    engine = create_ledger_engine(url)
    insert_rows(engine, key_rows())
    yield session_factory(engine)
    engine.dispose()


def test_a_spend_series_past_the_bound_asks_for_a_shorter_period(sessions) -> None:
    """One amount per key per day over any period was sent whole, however many keys."""
    assert NUM_DAYS * NUM_KEYS > MAX_VIEW_ROWS >= (NUM_DAYS - 1) * NUM_KEYS
    since, until = FIRST_DAY.replace(hour=0), FIRST_DAY + timedelta(days=NUM_DAYS)
    with pytest.raises(ReportTooLarge) as refused:
        spend_series(sessions, since, until, "key")
    assert (refused.value.field, refused.value.rule) == ("since", "report_too_large")
    assert str(refused.value).startswith(
        f"since: this period holds {NUM_DAYS * NUM_KEYS:,} amounts (days × values), more than "
        f"the {MAX_VIEW_ROWS:,} one reply sends"
    )
    shorter = spend_series(sessions, since, until - timedelta(days=1), "key")
    assert (len(shorter.days), len(shorter.series)) == (NUM_DAYS - 1, NUM_KEYS)
    assert shorter.series["acme/k-000"] == (Decimal("0.01"),) * (NUM_DAYS - 1)
    by_tenant = spend_series(sessions, since, until, "tenant")  # 100 days x 1 tenant
    assert by_tenant.report.totals.cost_usd == Decimal("0.01") * (NUM_DAYS + NUM_KEYS - 1)


def test_the_bound_is_on_what_is_sent() -> None:
    check_view_size(MAX_VIEW_ROWS)
    with pytest.raises(ReportTooLarge, match=f"holds {MAX_VIEW_ROWS + 1:,} rows"):
        check_view_size(MAX_VIEW_ROWS + 1)
