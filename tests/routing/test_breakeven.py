"""Break-even arithmetic: the note's F2 example and the advice rules."""

from __future__ import annotations

import pytest

from routing.breakeven import (
    ApiPrices,
    ModelAggregates,
    TokenCounts,
    breakeven_report,
    format_breakeven,
    u_star,
)

FLAT_2 = ApiPrices(input_usd_per_mtok=2.0, output_usd_per_mtok=2.0)


def _agg(fleet_mtok: float, api_mtok: float = 0.0, replicas: int = 1) -> ModelAggregates:
    half = int(fleet_mtok * 1e6 / 2)
    api_half = int(api_mtok * 1e6 / 2)
    return ModelAggregates(
        model="lantern-70b",
        hours=1.0,
        replicas=replicas,
        replica_usd_per_h=12.0,
        mtok_per_h_full=38.3,
        fleet=TokenCounts(input_tokens=half, output_tokens=half),
        api=TokenCounts(input_tokens=api_half, output_tokens=api_half),
        api_prices=FLAT_2,
    )


def test_f2_example_gives_u_star_0_16() -> None:
    assert round(u_star(12.0, 2.0, 38.3), 2) == 0.16
    assert u_star(12.0, 2.0, 38.3) == pytest.approx(12 / 76.6)


def test_report_reproduces_f2_from_traffic() -> None:
    report = breakeven_report(_agg(fleet_mtok=19.15))
    assert report.api_usd_per_mtok_blended == pytest.approx(2.0)
    assert round(report.u_star, 2) == 0.16
    assert report.utilisation == pytest.approx(0.5)
    assert report.advice == "stay"
    assert report.actual_cost_usd == pytest.approx(12.0)
    assert report.all_api_cost_usd == pytest.approx(38.30)
    # 19.15 Mtok at 65 % of 38.3 Mtok/h needs one replica
    assert report.all_fleet_replicas == 1
    assert report.all_fleet_cost_usd == pytest.approx(12.0)
    assert "12 / (2.000 x 38.3) = 0.157" in report.formula


def test_below_u_star_advises_scale_in() -> None:
    report = breakeven_report(_agg(fleet_mtok=3.83))  # u = 0.10 < 0.157
    assert report.utilisation == pytest.approx(0.10)
    assert report.advice == "scale_in"
    assert report.all_api_cost_usd == pytest.approx(7.66)
    assert report.actual_cost_usd == pytest.approx(12.0)


def test_overflow_above_u_star_advises_scale_out() -> None:
    # fleet at 0.6, and 7.66 Mtok (0.2 of a replica) overflowed to the API at $2/Mtok
    report = breakeven_report(_agg(fleet_mtok=22.98, api_mtok=7.66))
    assert report.advice == "scale_out"
    assert report.actual_cost_usd == pytest.approx(12.0 + 15.32)
    assert report.all_fleet_replicas == 2  # 30.64 / (38.3 x 0.65) = 1.23 -> 2


def test_over_headroom_advises_scale_out() -> None:
    report = breakeven_report(_agg(fleet_mtok=30.64))  # u = 0.8 > 0.65
    assert report.advice == "scale_out"


def test_no_fleet_with_enough_api_traffic_advises_scale_out() -> None:
    report = breakeven_report(_agg(fleet_mtok=0.0, api_mtok=19.15, replicas=0))
    assert report.utilisation == 0.0
    assert report.advice == "scale_out"
    assert report.actual_cost_usd == pytest.approx(38.30)


def test_cached_api_traffic_lowers_the_blend_and_raises_u_star() -> None:
    prices = ApiPrices(3.0, 15.0, cache_read_usd_per_mtok=0.3, cache_write_usd_per_mtok=3.75)
    agg = ModelAggregates(
        model="m",
        hours=2.0,
        replicas=2,
        replica_usd_per_h=12.0,
        mtok_per_h_full=38.3,
        fleet=TokenCounts(
            input_tokens=1_000_000,
            output_tokens=1_000_000,
            cache_read_tokens=8_000_000,
            cache_write_tokens=0,
        ),
        api=TokenCounts(),
        api_prices=prices,
    )
    report = breakeven_report(agg)
    # API cost of the mix: 3 + 15 + 2.4 = 20.4 $ for 2 Mtok of work -> 10.2 $/Mtok
    assert report.api_usd_per_mtok_blended == pytest.approx(10.2)
    assert report.u_star == pytest.approx(12 / (10.2 * 38.3))
    assert report.all_api_cost_usd == pytest.approx(20.4)
    assert report.actual_cost_usd == pytest.approx(48.0)


def test_format_shows_formula_and_advice() -> None:
    text = format_breakeven([breakeven_report(_agg(fleet_mtok=3.83))])
    assert "advice: scale in" in text
    assert "u* = replica $/h / (API $/Mtok x Mtok/h at full use)" in text


def test_invalid_prices_rejected() -> None:
    with pytest.raises(ValueError):
        u_star(12.0, 0.0, 38.3)
