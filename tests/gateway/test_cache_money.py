"""A call's cache money: reads saved, write premiums (5 m and 1 h), money lost and its cause."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest

from adapters.pricing import Price
from adapters.types import Usage
from gateway.core.cache_money import cache_money
from gateway.core.models_table import RoutePricing

MODEL = "m"
PRICING = RoutePricing(
    {
        MODEL: Price(
            input=Decimal("0.000003"),
            output=Decimal("0.000015"),
            cache_read=Decimal("0.0000003"),
            cache_write=Decimal("0.00000375"),
            cache_write_1h=Decimal("0.000006"),
        )
    }
)


def _diagnosis(reason: str, expected: int) -> str:
    return orjson.dumps({"reason": reason, "expected_prefix_tokens": expected}).decode()


def test_reads_and_writes_are_priced_against_the_input_price() -> None:
    usage = Usage(100, 50, cache_read_tokens=10_000, cache_write_tokens=2_000)
    money = cache_money(PRICING, MODEL, usage, _diagnosis("kept", 10_000))
    assert money.saved_usd == pytest.approx(10_000 * 0.0000027)
    assert money.premium_usd == pytest.approx(2_000 * 0.00000075)
    assert (money.lost_usd, money.cause) == (0.0, None)
    net = PRICING.uncached_cost_usd(MODEL, usage) - PRICING.cost_usd(MODEL, usage)
    assert money.saved_usd - money.premium_usd == pytest.approx(net)


def test_a_1h_write_pays_the_1h_premium() -> None:
    usage = Usage(0, 0, cache_write_tokens=1_000, cache_write_1h_tokens=1_000)
    assert cache_money(PRICING, MODEL, usage, None).premium_usd == pytest.approx(0.003)


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("volatile_block", "volatile_text"),
        ("tools_changed", "tools_changed"),
        ("history_rewritten", "history_edit"),
        ("ttl_expired", "ttl_expiry"),
    ],
)
def test_a_break_loses_the_reads_it_made_impossible(reason: str, cause: str) -> None:
    usage = Usage(9_000, 10, cache_read_tokens=1_000, cache_write_tokens=0)
    money = cache_money(PRICING, MODEL, usage, _diagnosis(reason, 6_000))
    assert money.cause == cause
    assert money.lost_usd == pytest.approx(5_000 * 0.0000027)


def test_a_kept_prefix_read_short_is_an_eviction_beyond_the_slack() -> None:
    short = Usage(5_000, 0, cache_read_tokens=5_000)
    assert cache_money(PRICING, MODEL, short, _diagnosis("kept", 10_000)).cause == "eviction"
    close = Usage(100, 0, cache_read_tokens=9_900)  # within the tokenizer slack
    assert cache_money(PRICING, MODEL, close, _diagnosis("kept", 10_000)).cause is None


def test_without_writes_the_premium_is_what_pricing_the_writes_gives() -> None:
    """`cache_money_of` skips pricing writes when there are none: the same 0.0 as pricing them."""
    for usage in (Usage(100, 5, cache_read_tokens=4_000), Usage(0, 0, cache_write_1h_tokens=0)):
        writes = Usage(cache_write_tokens=0, cache_write_1h_tokens=usage.cache_write_1h_tokens)
        priced = PRICING.cost_usd(MODEL, writes) - PRICING.uncached_cost_usd(MODEL, writes)
        money = cache_money(PRICING, MODEL, usage, None)
        assert (
            (money.premium_usd, repr(money.premium_usd)) == (priced, repr(priced)) == (0.0, "0.0")
        )
