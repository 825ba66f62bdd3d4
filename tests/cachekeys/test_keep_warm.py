"""The keep-warm rule: one minimal read before expiry only when it is cheaper than a rebuild."""

from __future__ import annotations

import pytest

from cachekeys.keep_warm import (
    LEAD_S,
    MAX_REFRESHES,
    keep_warm_choice,
    next_expiry,
    p_next_in_window,
)

PAUSES = (420.0, 480.0)  # a session that pauses 7-8 minutes between calls


def test_a_session_that_pauses_past_five_minutes_is_kept_warm() -> None:
    choice = keep_warm_choice(PAUSES, "5m", 300.0, 30000)
    assert choice.refresh
    assert choice.cost == pytest.approx(0.1 * 30000 + 5.0)  # prefix read + 1 output token
    assert choice.saving == pytest.approx(choice.p_window * 1.15 * 30000)
    assert 0.2 < choice.p_window < 0.25


def test_a_fast_session_silent_for_minutes_has_most_likely_stopped() -> None:
    choice = keep_warm_choice((20.0, 20.0, 20.0), "5m", 300.0, 30000)
    assert not choice.refresh and choice.p_window < 0.01


def test_pauses_of_a_day_are_not_worth_a_read() -> None:
    assert not keep_warm_choice((86400.0, 86400.0), "5m", 300.0, 30000).refresh
    assert not keep_warm_choice((86400.0, 86400.0), "1h", 3600.0, 30000).refresh


def test_an_hour_entry_is_kept_only_for_sessions_that_pause_near_an_hour() -> None:
    assert not keep_warm_choice(PAUSES, "1h", 3600.0, 30000).refresh
    assert keep_warm_choice((3000.0, 3000.0), "1h", 3600.0, 30000).refresh
    assert not keep_warm_choice((3000.0, 3000.0), "5m", 300.0, 30000).refresh


def test_a_cold_or_spent_session_is_never_refreshed() -> None:
    assert not keep_warm_choice((420.0,), "5m", 300.0, 30000).refresh  # one gap: not hot yet
    assert not keep_warm_choice(PAUSES, "5m", 300.0, 0).refresh  # nothing cached
    assert not keep_warm_choice(PAUSES, "5m", 300.0, 30000, MAX_REFRESHES).refresh


def test_a_tiny_prefix_is_kept_only_when_the_output_token_is_worth_it() -> None:
    # 30 tokens: the read costs 3 + 5 (one output token); a rebuild 0.22 x 1.15 x 30 ≈ 7.5.
    assert not keep_warm_choice(PAUSES, "5m", 300.0, 30).refresh
    assert keep_warm_choice(PAUSES, "5m", 300.0, 60).refresh
    # the route's own output price: at 15x input the one token tips it back
    assert not keep_warm_choice(PAUSES, "5m", 300.0, 60, output_ratio=15.0).refresh


def test_the_window_is_a_conditional_probability() -> None:
    assert p_next_in_window((), 0.0, 0.0, 1e9) == 0.0  # only the ended prior: no next call
    whole = p_next_in_window(PAUSES, 0.0, 0.0, 1e9)
    assert whole == pytest.approx(2.0 / 3.0, rel=1e-6)  # two real pauses, one ended pseudo-pause
    later = p_next_in_window(PAUSES, 600.0, 600.0, 1e9)
    assert 0.0 < later < whole


def test_a_read_moves_the_expiry_by_one_lifetime_from_when_it_is_sent() -> None:
    assert next_expiry(300.0, "5m") == pytest.approx(600.0 - LEAD_S)
    assert next_expiry(3600.0, "1h") == pytest.approx(7200.0 - LEAD_S)
