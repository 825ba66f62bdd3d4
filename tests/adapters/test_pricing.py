"""Prices from LiteLLM's bundled cost map: exact costs, derived cache prices, unknown models."""

from __future__ import annotations

from decimal import Decimal

import pytest

from adapters.pricing import (
    Price,
    PriceBook,
    UnknownPrice,
    cost,
    cost_decimal,
    uncached_cost,
    uncached_cost_decimal,
)
from adapters.types import Usage


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.from_litellm(
        {
            "my-finetune": Price(
                Decimal("0.000001"),
                Decimal("0.000002"),
                Decimal("0.0000001"),
                Decimal("0.00000125"),
            )
        }
    )


def test_gpt_4o_mini_from_the_local_map(book: PriceBook) -> None:
    price = book.price_for("gpt-4o-mini")
    assert price == Price(
        Decimal("1.5E-7"), Decimal("6E-7"), Decimal("7.5E-8"), Decimal("1.875E-7")
    )  # no write price in the map: 1.25 x input
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=2_000_000)
    assert cost_decimal(usage, price) == Decimal("0.90")
    assert cost(usage, price) == 0.9
    assert uncached_cost_decimal(usage, price) == Decimal("1.05")
    assert book.price_for("openai/gpt-4o-mini") == price


def test_claude_with_cache_prices(book: PriceBook) -> None:
    price = book.price_for("anthropic/claude-sonnet-4-5")
    assert price == Price(
        Decimal("3E-6"), Decimal("0.000015"), Decimal("3E-7"), Decimal("0.00000375")
    )
    usage = Usage(
        input_tokens=100_000,
        output_tokens=20_000,
        cache_read_tokens=400_000,
        cache_write_tokens=50_000,
    )
    assert cost_decimal(usage, price) == Decimal("0.9075")
    assert round(cost(usage, price), 2) == 0.91
    assert uncached_cost(usage, price) == 1.95
    assert uncached_cost_decimal(usage, price) - cost_decimal(usage, price) == Decimal("1.0425")


def test_overrides_win_and_unknown_models_raise(book: PriceBook) -> None:
    assert book.price_for("my-finetune").cache_write == Decimal("0.00000125")
    with pytest.raises(UnknownPrice) as info:
        book.price_for("no-such-model-xyz")
    assert info.value.model == "no-such-model-xyz"
    assert book.has_price("gpt-4o") and not book.has_price("vendor/no-such-model-xyz")


def test_missing_cache_prices_are_derived() -> None:
    book = PriceBook(
        {
            "m": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06},
            "image-only": {"output_cost_per_image": 0.04},
        }
    )
    assert book.price_for("m") == Price(
        Decimal("0.000002"), Decimal("0.000008"), Decimal("2E-7"), Decimal("0.0000025")
    )
    with pytest.raises(UnknownPrice):
        book.price_for("image-only")
