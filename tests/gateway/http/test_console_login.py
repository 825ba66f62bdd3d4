"""Console sessions over the real ledger database (SQLite and PostgreSQL), two stores on two
engines standing for two gateway processes; the login throttle's window and bound."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pydantic
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from gateway.http.console.login import COOKIE, ConsoleSessions
from gateway.http.console.session_store import ConsoleSessionStore
from gateway.http.console.throttle import LoginThrottle
from gateway.ledger.db import create_ledger_engine, migrate, session_factory
from gateway.settings import ConsoleSettings

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
TTL_S = 3600


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engines(request, tmp_path) -> Iterator[tuple[Engine, Engine]]:
    url = (
        request.getfixturevalue("postgres_url")
        if request.param == "postgres"
        else f"sqlite:///{tmp_path}/ledger.db"
    )
    migrate(url)
    pair = create_ledger_engine(url), create_ledger_engine(url)
    yield pair
    for engine in pair:
        engine.dispose()


def sessions_on(
    engine: Engine, clock: Clock, token: str = "admin", max_sessions: int = 8
) -> ConsoleSessions:
    cookies = (f"cookie-{n}" for n in itertools.count())
    store = ConsoleSessionStore(session_factory(engine), max_sessions)
    return ConsoleSessions(token, b"secret", store, clock, TTL_S, lambda: next(cookies))


def jar(cookie: str | None) -> dict[str, str]:
    assert cookie is not None
    return {COOKIE: cookie}


def test_a_login_is_seen_and_ended_by_every_process(engines) -> None:
    clock = Clock()
    first, second = sessions_on(engines[0], clock), sessions_on(engines[1], clock)
    assert first.login("wrong") is None
    cookie = jar(first.login("admin"))
    assert first.is_valid(cookie) and second.is_valid(cookie)
    assert not second.is_valid({COOKIE: "cookie-7"}) and not second.is_valid({})
    second.logout(cookie)
    assert not first.is_valid(cookie)


def test_a_session_ends_at_its_expiry_and_with_the_admin_token(engines) -> None:
    clock = Clock()
    sessions = sessions_on(engines[0], clock)
    cookie = jar(sessions.login("admin"))
    clock.now = NOW + timedelta(seconds=TTL_S - 1)
    assert sessions.is_valid(cookie)
    clock.now = NOW + timedelta(seconds=TTL_S)
    assert not sessions.is_valid(cookie)

    clock.now = NOW
    cookie = jar(sessions.login("admin"))
    rotated = sessions_on(engines[1], clock, token="rotated")
    assert not rotated.is_valid(cookie)
    assert jar(rotated.login("rotated")) != cookie  # and it clears the old token's sessions
    with engines[0].connect() as db:
        assert db.execute(sa.text("SELECT count(*) FROM console_sessions")).scalar_one() == 1


def test_the_table_keeps_only_the_newest_sessions(engines) -> None:
    clock = Clock()
    sessions = sessions_on(engines[0], clock, max_sessions=3)
    cookies = []
    for minute in range(5):
        clock.now = NOW + timedelta(minutes=minute)
        cookies.append(jar(sessions.login("admin")))
    assert [sessions.is_valid(c) for c in cookies] == [False, False, True, True, True]
    with engines[0].connect() as db:
        assert db.execute(sa.text("SELECT count(*) FROM console_sessions")).scalar_one() == 3


def test_the_form_token_is_the_cookies_own() -> None:
    unused = ConsoleSessionStore(session_factory(create_ledger_engine("sqlite://")), 1)
    sessions = ConsoleSessions("admin", b"secret", unused, Clock(), TTL_S)
    token = sessions.form_token({COOKIE: "a"})
    assert sessions.is_form_token({COOKIE: "a"}, token)
    assert not sessions.is_form_token({COOKIE: "b"}, token)
    assert not sessions.is_form_token({COOKIE: "a"}, "é" * 32)  # not ASCII: refused, no error


def test_the_throttle_holds_an_address_until_its_window_ends() -> None:
    now = [0.0]
    throttle = LoginThrottle(3, 60.0, lambda: now[0], max_addresses=2)
    for _ in range(3):
        assert throttle.retry_after_s("a") is None
        throttle.failed("a")
    now[0] = 10.5
    assert throttle.retry_after_s("a") == 50
    assert throttle.retry_after_s("b") is None
    now[0] = 60.0
    assert throttle.retry_after_s("a") is None  # a new window
    throttle.failed("a")
    throttle.succeeded("a")  # the right token clears the address's count
    for address in ("a", "b", "c"):
        for _ in range(3):
            throttle.failed(address)
    assert throttle.retry_after_s("a") is None  # the oldest address left the bounded table
    assert (throttle.retry_after_s("b"), throttle.retry_after_s("c")) == (60, 60)


def test_a_session_ttl_past_a_year_is_refused_and_a_year_logs_in(engines) -> None:
    """A TTL meant as "never" (10**12 s) was accepted, and every login then failed with a 500:
    its expiry was past what a datetime holds."""
    with pytest.raises(pydantic.ValidationError, match="session_ttl_s"):
        ConsoleSettings(session_ttl_s=10**12)
    ttl_s = ConsoleSettings(session_ttl_s=366 * 86400).session_ttl_s
    store = ConsoleSessionStore(session_factory(engines[0]), 8)
    sessions = ConsoleSessions("admin", b"secret", store, Clock(), ttl_s)
    assert sessions.is_valid(jar(sessions.login("admin")))
